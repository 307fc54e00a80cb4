"""Benchmark configurations: what every commit is measured with."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound
from ..models import BenchConfig
from . import repository as config_sql
from .schemas import ConfigCreate, ConfigUpdate


def create_config(session: Session, data: ConfigCreate) -> BenchConfig:
    if config_sql.by_name(session, data.name) is not None:
        raise Conflict(f"benchmark config {data.name!r} already exists")
    config = BenchConfig(**data.model_dump())
    session.add(config)
    session.flush()
    return config


def update_config(session: Session, config_id: int, data: ConfigUpdate) -> BenchConfig:
    config = config_sql.by_id(session, config_id)
    if config is None:
        raise NotFound(f"no benchmark config {config_id}")
    for field, value in data.model_dump(exclude_none=True).items():
        setattr(config, field, value)
    session.flush()
    return config
