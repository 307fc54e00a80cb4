"""SQL for benchmark configurations."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from ..models import BenchConfig


def configs_statement(enabled: bool | None = None) -> Select[tuple[BenchConfig]]:
    statement = select(BenchConfig).order_by(BenchConfig.id)
    if enabled is not None:
        statement = statement.where(BenchConfig.enabled.is_(enabled))
    return statement


def by_id(session: Session, config_id: int) -> BenchConfig | None:
    return session.get(BenchConfig, config_id)


def by_name(session: Session, name: str) -> BenchConfig | None:
    return session.scalar(select(BenchConfig).where(BenchConfig.name == name))


def enabled_ids(session: Session) -> list[int]:
    return list(session.scalars(select(BenchConfig.id).where(BenchConfig.enabled.is_(True)).order_by(BenchConfig.id)))
