"""The agent daemon's configuration: a TOML file, every key overridable by ``PERFCI_AGENT_<KEY>``.

The keys are a contract shared with the Ansible role that writes ``/etc/perfci/agent.toml``
(docs/operations.md, "Running an agent"). The environment wins over the file; list values in the environment
are comma-separated. Unknown keys in the file are errors (a typo must not silently fall back to a
default); every problem is reported, not only the first.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ENV_PREFIX = "PERFCI_AGENT_"
BackendName = Literal["auto", "pmu", "sim", "tsc"]


class ConfigFileError(Exception):
    """The file itself cannot be read (missing, unreadable): a usage error."""


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    server_url: str = Field(min_length=1)
    machine_name: str = Field(min_length=1, max_length=128)
    state_dir: Path = Path("/var/lib/perfci-agent")
    token_file: Path | None = None
    enrollment_token: str = ""
    cores: list[int] = Field(default_factory=lambda: [2, 3], min_length=1)
    backends: list[BackendName] = Field(default_factory=lambda: ["auto"], min_length=1)
    repetitions: int = Field(0, ge=0, le=100)
    refuse_untuned: bool = False
    sim_family: str = ""  # sim's store-buffer model (intel-icx, intel-spr, intel-skx, amd-zen4); "" = this CPU's
    poll_seconds: float = Field(5.0, gt=0, le=3600)
    heartbeat_seconds: float = Field(30.0, gt=0, le=86400)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("server_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {v!r}")
        return v.rstrip("/")

    @field_validator("sim_family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        from ..hazards import FAMILIES

        if v and v not in FAMILIES:
            raise ValueError(f"unknown store-buffer family {v!r}; known: {', '.join(FAMILIES)}")
        return v

    @field_validator("token_file", mode="before")
    @classmethod
    def _empty_is_default(cls, v: Any) -> Any:
        return None if v in ("", None) else v

    @field_validator("cores")
    @classmethod
    def _cores(cls, v: list[int]) -> list[int]:
        if any(c < 0 for c in v) or len(set(v)) != len(v):
            raise ValueError(f"must be distinct CPU numbers >= 0, got {v}")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @property
    def token_path(self) -> Path:
        return self.token_file or self.state_dir / "agent.token"

    @property
    def spool_dir(self) -> Path:
        return self.state_dir / "spool"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"

    @property
    def enrollment_path(self) -> Path:
        return self.state_dir / "enrollment.json"

    @property
    def core(self) -> int:
        """The forwarding core (the first one listed)."""
        return self.cores[0]


KEYS = tuple(AgentConfig.model_fields)
_LISTS = {"cores", "backends"}


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``PERFCI_AGENT_*`` values for known keys (lists split on commas; pydantic converts types)."""
    values: dict[str, Any] = {}
    for key in KEYS:
        raw = environ.get(ENV_PREFIX + key.upper())
        if raw is None:
            continue
        values[key] = [part.strip() for part in raw.split(",") if part.strip()] if key in _LISTS else raw.strip()
    return values


def load(path: str | Path | None, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """The configuration from ``path`` (may be None: environment only) with the environment on top."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            raise ConfigFileError(f"config file {path} does not exist") from None
        except OSError as exc:
            raise ConfigFileError(f"config file {path} cannot be read: {exc.strerror}") from None
        try:
            values = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
        origin = {key: str(path) for key in values}
    env_values = from_environment(environ)
    values.update(env_values)
    origin.update({key: ENV_PREFIX + key.upper() for key in env_values})
    try:
        return AgentConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError([_problem(err, origin) for err in exc.errors()]) from None


def _problem(err: Any, origin: dict[str, str]) -> str:
    loc = err.get("loc") or ("?",)
    key = str(loc[0])
    where = f" (from {origin[key]})" if key in origin else ""
    if err.get("type") == "extra_forbidden":
        return f"{key}: unknown key{where}; known keys: {', '.join(KEYS)}"
    if err.get("type") == "missing":
        return f"{key}: required (set it in the file or {ENV_PREFIX}{key.upper()})"
    item = f"[{loc[1]}]" if len(loc) > 1 else ""
    return f"{key}{item}: {err.get('msg')}{where}"
