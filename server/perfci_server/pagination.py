"""Limit/offset pagination with the total, one generic page model for every list endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

T = TypeVar("T")


@dataclass(frozen=True)
class PageParams:
    limit: int = 50
    offset: int = 0


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


def paginate(session: Session, statement: Select[Any], params: PageParams, item: Callable[[Any], T]) -> Page[T]:
    """One page of ``statement`` (which must be ordered), each row made an item, and the total.

    A single-entity statement yields the entities; a multi-column one yields Row tuples.
    """
    total = session.scalar(select(func.count()).select_from(statement.order_by(None).subquery())) or 0
    page = statement.limit(params.limit).offset(params.offset)
    rows = session.scalars(page) if len(statement.column_descriptions) == 1 else session.execute(page).all()
    return Page(items=[item(row) for row in rows], total=total, limit=params.limit, offset=params.offset)
