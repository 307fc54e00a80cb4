"""The forge benchmarks' stack (run.py, team.py): a throwaway Gitea, `perfci server` (the API and a
Celery worker) on the benchmark's own database and Redis database (benchmarks/owned.py), one
repository with its webhook, one config, and one `perfci agent run` on the `sim` backend polling as
deployed (poll_seconds at its default: an idle claim waits on the server for a job)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfci_agent.daemon.config import AgentConfig
from perfci_server import migrate

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks and tests packages
from benchmarks import owned
from tests.e2e.e2e_support import Stack, agent_argv, agent_env, free_port, server_env, start_api, start_worker
from tests.forge.gitea import Gitea, GiteaBuild, Repo  # the throwaway Gitea the tests drive

DEFAULT_POLL_S = AgentConfig.model_fields["poll_seconds"].default


@dataclass
class Forge:
    stack: Stack
    gitea: Gitea
    repo: Repo
    admin: Any  # the server's admin API client
    url: str  # the server's


@contextmanager
def forge_stack(tmp: Path, name: str, config: dict[str, Any], machine: str) -> Iterator[Forge]:
    """The stack of benchmark ``name`` (its database and repository are named after it), stopped after."""
    database = owned.recreate_database(owned.default_database_url(name))
    migrate.upgrade(database)
    broker = owned.default_redis_url()
    owned.claim_redis(broker)
    stack = Stack(tmp)
    gitea = Gitea.start(GiteaBuild.from_env(), tmp / "gitea")
    try:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = server_env(database, broker, tmp / "server", port, gitea_api_url=f"{gitea.url}/api/v1", gitea_token=gitea.token,
                         public_url=url)
        _, admin = start_api(stack, env, port)
        start_worker(stack, env)
        repo = gitea.create_repo(f"dataplane-{name}")
        secret = secrets.token_hex(16)
        admin.post("/repositories", {"name": repo.full_name, "forge": "gitea", "clone_url": gitea.clone_url(repo),
                                     "webhook_secret": secret})
        admin.post("/configs", config)
        enrollment = admin.post("/enrollment-tokens", {"note": f"the {name} benchmark"})["token"]
        gitea.add_webhook(repo, f"{url}/api/v1/webhooks/gitea", secret)
        stack.add("agent", agent_argv(tmp, url, machine, enrollment, poll_seconds=DEFAULT_POLL_S), agent_env(env)).start()
        yield Forge(stack, gitea, repo, admin, url)
    finally:
        for proc in reversed(stack.procs):
            proc.stop()
        gitea.stop()
