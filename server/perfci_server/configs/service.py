"""Benchmark configurations: what every commit is measured with."""

from __future__ import annotations

from sqlalchemy.orm import Session

from .. import dispatch
from ..errors import Conflict, NotFound
from ..models import BenchConfig
from . import repository as config_sql
from .schemas import ConfigCreate, ConfigUpdate


def create_config(session: Session, data: ConfigCreate) -> BenchConfig:
    """A new config; once committed, the newest commits of each branch get its jobs (the jobs
    room's backfill task) so its first push is judged against history."""
    if config_sql.by_name(session, data.name) is not None:
        raise Conflict(f"benchmark config {data.name!r} already exists")
    config = BenchConfig(**data.model_dump())
    session.add(config)
    session.flush()
    if config.enabled:
        dispatch.send_after_commit(session, dispatch.BACKFILL_TASK, None, [config.id])
    return config


def update_config(session: Session, config_id: int, data: ConfigUpdate) -> BenchConfig:
    config = config_sql.by_id(session, config_id)
    if config is None:
        raise NotFound(f"no benchmark config {config_id}")
    for field, value in data.model_dump(exclude_none=True).items():
        setattr(config, field, value)
    session.flush()
    return config
