"""The one settings class. Every knob comes from the environment with the ``PERFCI_`` prefix."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Only acceptable while PERFCI_ENV=development: anyone reading this file knows it.
DEVELOPMENT_ADMIN_TOKEN = "perfci-development-admin-token"

Env = Literal["development", "test", "production"]


class Settings(BaseSettings):
    # An invalid setting is reported by name and rule, never with its value (a token, a URL's password).
    model_config = SettingsConfigDict(env_prefix="PERFCI_", extra="ignore", hide_input_in_errors=True)

    # Unset: development with the embedded database (the development admin token then works only
    # on loopback connections, deps.py), production with any other (PERFCI_ADMIN_TOKEN required):
    # a server pointed at a real database never runs on the public token by default.
    env: Env | None = None  # never None once validated

    # Unset → embedded SQLite file under data_dir (single machine, the demo).
    database_url: str | None = None
    data_dir: Path = Path(".perfci")
    database_pool_size: int = Field(10, ge=1, le=200)
    # Claims and uploads of one server process inside the database at once (claims let in first,
    # database_slots.py); more only adds GIL contention to each one's latency (benchmarks/server_ingest).
    database_slots: int = Field(4, ge=1, le=200)
    database_echo: bool = False

    # Unset → Celery tasks run in-process (eager); the embedded default needs no broker.
    broker_url: str | None = None

    # The read-only PostgreSQL role Grafana connects as (migration 0008: SELECT on the dash_* views
    # only). `perfci admin migrate` gives it LOGIN with this password when one is set.
    grafana_db_user: str = Field("perfci_grafana", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    grafana_db_password: SecretStr | None = None

    admin_token: SecretStr = SecretStr(DEVELOPMENT_ADMIN_TOKEN)
    # Reads (series, compare, lists: fingerprints, clone URLs, agent names) need an admin/API token
    # except with PERFCI_ENV=development (and the demo, which runs development). Set explicitly to
    # override either way; mutations always need a token.
    read_requires_token: bool | None = None

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)

    lease_seconds: int = Field(600, ge=5)
    max_attempts: int = Field(3, ge=1, le=20)
    requeue_interval_seconds: float = Field(30.0, gt=0)
    enrollment_token_ttl_seconds: int = Field(24 * 3600, ge=60)

    # Request bodies: the most each route reads (413 beyond, before anything parses it; bodies.py).
    webhook_max_bytes: int = Field(5 * 1024 * 1024, ge=1024)  # forge deliveries (GitHub sends up to 25 MB)
    upload_max_bytes: int = Field(2 * 1024 * 1024, ge=1024)  # result documents and failure reports
    enroll_max_bytes: int = Field(16 * 1024, ge=1024)  # enrollment, unauthenticated: a name and a fingerprint (~1 KB)
    body_max_bytes: int = Field(128 * 1024, ge=1024)  # every other body: admin requests, heartbeats, leases

    task_time_limit_seconds: int = Field(120, ge=5)

    # Pushes: the server keeps a bare mirror of each repository under data_dir/mirrors and records
    # every first-parent commit of a push from it (forges list at most 20). A webhook is answered
    # with the listed commits recorded; a task then fetches the mirror (at most this long; a first
    # clone can be large), retried with backoff, and beat retries what is still incomplete every
    # push_retry_interval_seconds.
    mirror_fetch_timeout_seconds: float = Field(240.0, gt=0, le=540)
    # Fetches from one forge host at a time across every worker: a hanging forge holds at most this
    # many worker slots (keep it below the workers' concurrency); the others serve other forges.
    fetches_per_forge_host: int = Field(1, ge=1, le=64)
    push_retry_interval_seconds: float = Field(120.0, gt=0)
    # At most this many commits from one push (a new branch of a repository whose other branches
    # are not tracked yet would otherwise bring its whole history).
    push_max_commits: int = Field(100, ge=1, le=100_000)
    # Clone URLs are http(s), ssh or scp-like; file:// and local paths would let any API token
    # mirror (and read the commit messages of) a repository on the server's own disk: only the demo
    # and tests, which serve their repositories from a directory, turn this on.
    allow_local_clone_urls: bool = False
    # SSH clone URLs: the deploy key to fetch with (https URLs on the forge's host use its token
    # below).
    mirror_ssh_key_file: Path | None = None

    # Detection: how many measured commits of a branch each series run looks back over.
    detection_window_commits: int = Field(200, ge=10, le=5000)
    # Keep each series' window between detections (table detection_windows) and read only the
    # commits with new runs; false re-reads the whole window every time (same verdicts, slower).
    detection_window_cache: bool = True
    # Beat resends detection for a machine whose successful runs waited longer than this unanalysed.
    detection_straggler_seconds: float = Field(300.0, gt=0)
    detection_sweep_interval_seconds: float = Field(60.0, gt=0)
    # Confirmation (alerts.confirm): a suspected change gets interleaved sessions of a commit before it and one
    # after it (at most confirm_looks, confirm_pairs pairs each); a change found at a range gets rounds of the
    # commits around it (at most confirm_max_rounds extra jobs per commit); extra repetitions per machine x
    # config stay within this fraction of the window's own.
    confirm_suspects: bool = True
    confirm_budget_fraction: float = Field(0.30, ge=0.0, le=10.0)
    confirm_looks: int = Field(3, ge=1, le=20)
    confirm_pairs: int = Field(24, ge=8, le=200)
    confirm_max_rounds: int = Field(12, ge=1, le=50)
    # Pull requests: interleaved sessions a head may take per machine x config while a metric perfci alerts on
    # stays undecided on a noisy backend (pulls.sessions: alpha is spent over them; 3 sessions of 9 pairs).
    pull_sessions: int = Field(3, ge=1, le=10)
    # The smallest margin an unchanged head is shown within ("unchanged within +/- x %", pulls.sessions): each
    # metric's learned minimum effect, at least this (relative).
    pull_equivalence: float = Field(0.03, ge=0.0, le=0.5)
    # Explanation: measured commits on each side of a range whose medians feed the lean model.
    explanation_window_commits: int = Field(10, ge=1, le=200)

    # Start a server bisect (on the alert's machine) for every new regression alert group.
    auto_bisect_regressions: bool = False
    # Base URL of this server as a browser reaches it: status and comment links lead to its
    # read-only verdict pages (/v/{id}); without it, statuses carry no link.
    public_url: str | None = Field(None, description="Base URL of this server, for status links")
    # Each forge of forge/registry.py: its API root and a token (statuses, the pull-request comment,
    # fetching private repositories). No token for a forge: its verdicts are kept, not posted.
    github_api_url: str = "https://api.github.com"
    github_token: SecretStr | None = None
    gitlab_api_url: str = "https://gitlab.com/api/v4"
    gitlab_token: SecretStr | None = None
    gitea_api_url: str = "http://127.0.0.1:3000/api/v1"  # e.g. https://gitea.example.com/api/v1 (also Forgejo)
    gitea_token: SecretStr | None = None
    # Grafana's base URL: the read-only verdict pages link each alert to its Alerts dashboard.
    grafana_url: str | None = None
    # A machine that enrolls or a config that is added gets jobs for this many of the newest
    # commits of each tracked branch (oldest first, after every other job): history to judge
    # the next push against. 0 turns it off.
    backfill_commits: int = Field(20, ge=0, le=10_000)
    status_context: str = Field("perfci", min_length=1, max_length=100)
    forge_timeout_seconds: float = Field(10.0, gt=0)
    # Retries of one post: backoff x 2^n seconds (capped), then the resend sweep takes over.
    forge_retry_backoff_seconds: float = Field(5.0, gt=0)
    forge_retry_backoff_max_seconds: float = Field(600.0, gt=0)
    forge_max_retries: int = Field(6, ge=0, le=50)
    forge_resend_interval_seconds: float = Field(300.0, gt=0)
    # A pending status whose commit has had nothing queued or running on its machine this long is
    # decided again (forge.statuses.settle_pending): every status ends.
    status_settle_seconds: float = Field(600.0, gt=0)

    # Logs (docs/operations.md, "What the logs say"): one JSON object per line or text; unset, JSON
    # in production and text otherwise.
    log_format: Literal["text", "json"] | None = None
    log_level: str = Field("info", pattern=r"(?i)^(debug|info|warning|error|critical)$")
    # A bearer token that opens /metrics and nothing else (a Prometheus scrape); admin and API tokens
    # open it too. /metrics needs a token wherever reads do.
    metrics_token: SecretStr | None = None

    _env_implied: bool = PrivateAttr(False)

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token_length(cls, value: SecretStr | None) -> SecretStr | None:
        secret = value.get_secret_value() if value is not None else ""
        if 0 < len(secret) < 24:
            raise ValueError("PERFCI_METRICS_TOKEN must be at least 24 characters (or empty: no metrics token)")
        return value if secret else None

    @model_validator(mode="after")
    def _refuse_unsafe_defaults(self) -> Settings:
        if self.env is None:
            self._env_implied = True
            self.env = "production" if self.database_url else "development"
        if self.env != "development":
            token = self.admin_token.get_secret_value()
            if token == DEVELOPMENT_ADMIN_TOKEN or len(token) < 24:
                implied = " (PERFCI_ENV is unset and PERFCI_DATABASE_URL is set; set PERFCI_ENV=development to use the public token)"
                raise ValueError(
                    f"PERFCI_ADMIN_TOKEN must be set to a secret of at least 24 characters "
                    f"when PERFCI_ENV={self.env} (the development default is public)" + (implied if self._env_implied else "")
                )
        return self

    @property
    def development_token_loopback_only(self) -> bool:
        """Development by default (PERFCI_ENV unset, embedded database): the public token is taken
        only on loopback connections. An explicit PERFCI_ENV=development takes it from anywhere."""
        return self._env_implied and self.env == "development"

    @property
    def reads_require_token(self) -> bool:
        if self.read_requires_token is not None:
            return self.read_requires_token
        return self.env != "development"

    @property
    def effective_log_format(self) -> str:
        return self.log_format or ("json" if self.env == "production" else "text")

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'perfci.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    @property
    def tasks_run_eagerly(self) -> bool:
        return not self.broker_url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
