"""`perfci server|worker|beat` and `perfci admin ...`. Imports stay inside the commands so
`perfci --help` does not load FastAPI, SQLAlchemy or Celery."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .forge.registry import Forge

admin = typer.Typer(help="Administer the results service (database, repositories, configs, tokens).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("server", help="Run the results service (uvicorn).")(server)
    app.command("worker", help="Run a Celery worker for the results service.")(worker)
    app.command("beat", help="Run Celery beat (periodic lease sweep).")(beat)
    app.add_typer(admin, name="admin")


def _echo_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def server(
    host: Annotated[Optional[str], typer.Option(help="Listen address (default PERFCI_HOST, 127.0.0.1)")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default PERFCI_PORT, 8000)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes")] = 1,
    migrate: Annotated[Optional[bool], typer.Option(help="Upgrade the schema first (default: only for embedded SQLite)")] = None,
) -> None:
    import uvicorn

    from . import logs
    from .settings import get_settings

    settings = get_settings()
    logs.configure(settings)
    if migrate if migrate is not None else settings.is_sqlite:
        _migrate_to_head()
    uvicorn.run(
        "perfci_server.asgi:app",
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_config=None,  # logs.configure's format; each worker process configures it again (asgi.py)
        log_level=settings.log_level.lower(),
        access_log=False,  # the request line (request_log.py) says it once
    )


LogLevel = Annotated[Optional[str], typer.Option(help="Log level (default PERFCI_LOG_LEVEL, info)")]


def _celery_logs(loglevel: str | None) -> tuple[list[str], str]:
    """Logs configured for a Celery process (its own setup then leaves them be, celery_app.py): the
    options that go before Celery's command (no banner in JSON: every line is an object), the level."""
    from . import logs
    from .settings import get_settings

    settings = get_settings()
    level = (loglevel or settings.log_level).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        typer.echo(f"--loglevel: {loglevel!r} is not one of debug, info, warning, error, critical", err=True)
        raise typer.Exit(2)
    logs.configure(settings, level)
    return (["--quiet"] if settings.effective_log_format == "json" else []), level


def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="Worker processes")] = 2,
    loglevel: LogLevel = None,
) -> None:
    from .celery_app import celery_app
    from .settings import get_settings

    if get_settings().tasks_run_eagerly:
        typer.echo("PERFCI_BROKER_URL is not set: tasks run inside the server, no worker is needed.", err=True)
        raise typer.Exit(1)
    options, level = _celery_logs(loglevel)
    celery_app.worker_main([*options, "worker", f"--concurrency={concurrency}", f"--loglevel={level}", "-Q", "perfci"])


def beat(loglevel: LogLevel = None) -> None:
    from .celery_app import celery_app
    from .settings import get_settings

    if get_settings().tasks_run_eagerly:
        typer.echo("PERFCI_BROKER_URL is not set: beat needs a broker.", err=True)
        raise typer.Exit(1)
    options, level = _celery_logs(loglevel)
    data_dir = get_settings().data_dir
    data_dir.mkdir(parents=True, exist_ok=True)  # beat keeps its schedule file there
    celery_app.start([*options, "beat", f"--loglevel={level}", "--schedule", str(data_dir / "celerybeat-schedule")])


def _migrate_to_head() -> None:
    from . import db, migrate
    from .settings import get_settings

    engine = db.get_engine()  # creates the embedded SQLite directory when needed
    migrate.upgrade()
    settings = get_settings()
    if settings.grafana_db_password is not None and not settings.is_sqlite:
        migrate.set_dashboard_login(engine, settings.grafana_db_user, settings.grafana_db_password.get_secret_value())


@admin.command("migrate", help="Upgrade the database schema to the latest revision.")
def admin_migrate() -> None:
    _migrate_to_head()
    typer.echo("database schema is up to date")


@admin.command("create-repo", help="Register a repository; prints its webhook secret once.")
def create_repo(
    name: Annotated[str, typer.Argument(help="The repository as its forge's webhooks name it (owner/name)")],
    clone_url: Annotated[str, typer.Option(help="URL agents clone from")],
    forge: Annotated[Forge, typer.Option(help="The forge that hosts it")] = Forge.GITHUB,
    webhook_secret: Annotated[Optional[str], typer.Option(help="Use this secret instead of generating one")] = None,
    track_tags: Annotated[bool, typer.Option(help="Also benchmark pushed tags")] = False,
    default_branch: Annotated[str, typer.Option(help="The base other branches are judged against")] = "main",
) -> None:
    from .db import session_scope
    from .repos.schemas import RepositoryCreate, RepositoryCreated
    from .repos.service import create_repository

    data = RepositoryCreate(name=name, forge=forge, clone_url=clone_url, webhook_secret=webhook_secret, track_tags=track_tags,
                            default_branch=default_branch)
    with session_scope() as session:
        repository = create_repository(session, data)
        created = RepositoryCreated.model_validate(repository, from_attributes=True)
    _echo_json(created.model_dump(mode="json"))


@admin.command("create-config", help="Add a benchmark configuration (fields of the agent's BenchConfig).")
def create_config(
    name: Annotated[str, typer.Argument()],
    harness: Annotated[str, typer.Option()] = "self",
    pkt_size: Annotated[int, typer.Option()] = 64,
    flows: Annotated[int, typer.Option()] = 1024,
    routes: Annotated[str, typer.Option()] = "default",
    packets: Annotated[int, typer.Option()] = 2_000_000,
    warmup: Annotated[int, typer.Option()] = 200_000,
    lcores: Annotated[Optional[int], typer.Option(help="forwarding lcores (scaling: the most; default: one, or the agent's allotted cores)")] = None,
    scaling: Annotated[bool, typer.Option(help="run each repetition at 1, 2, 4, ... lcores and fit Amdahl's serial fraction (three counts or more)")] = False,
    backend: Annotated[str, typer.Option(help="auto, pmu, sim or tsc")] = "auto",
    repetitions: Annotated[int, typer.Option()] = 5,
) -> None:
    from .configs.schemas import ConfigCreate, ConfigRead
    from .configs.service import create_config as create
    from .db import session_scope

    data = ConfigCreate.model_validate(
        dict(name=name, harness=harness, pkt_size=pkt_size, flows=flows, routes=routes, packets=packets, warmup=warmup, lcores=lcores, scaling=scaling, backend=backend, repetitions=repetitions)
    )
    with session_scope() as session:  # its backfill is a task, sent once this commits
        config = ConfigRead.model_validate(create(session, data))
    _echo_json(config.model_dump(mode="json"))


@admin.command("enrollment-token", help="Issue a single-use token an agent exchanges for its own token.")
def enrollment_token(
    note: Annotated[str, typer.Option(help="Free text: which host it is for")] = "",
    ttl_seconds: Annotated[Optional[int], typer.Option(help="Validity (default PERFCI_ENROLLMENT_TOKEN_TTL_SECONDS)")] = None,
) -> None:
    from .agents.service import issue_enrollment_token
    from .db import session_scope
    from .settings import get_settings

    with session_scope() as session:
        token, row = issue_enrollment_token(session, get_settings(), note, ttl_seconds)
        expires = row.expires_at
    _echo_json({"token": token, "expires_at": expires})


@admin.command("api-token", help="Create an API token for mutations (scripts, the CLI).")
def api_token(name: Annotated[str, typer.Argument()]) -> None:
    from .agents.service import create_api_token
    from .db import session_scope

    with session_scope() as session:
        row, token = create_api_token(session, name)
        token_id = row.id
    _echo_json({"id": token_id, "name": name, "token": token})
