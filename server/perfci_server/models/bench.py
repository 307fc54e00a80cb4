"""Benchmark configurations: the fields of the agent's BenchConfig plus the backend to use."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Integer, String, false
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, CreatedAtMixin, IdMixin


class BenchConfig(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "bench_configs"

    name: Mapped[str] = mapped_column(String(128), unique=True)
    harness: Mapped[str] = mapped_column(String(16), default="self")
    pkt_size: Mapped[int] = mapped_column(Integer, default=64)
    flows: Mapped[int] = mapped_column(Integer, default=1024)
    routes: Mapped[str] = mapped_column(String(1024), default="default")
    packets: Mapped[int] = mapped_column(BigInteger, default=2_000_000)
    warmup: Mapped[int] = mapped_column(BigInteger, default=200_000)
    # Forwarding lcores; a scaling config runs 1, 2, 4, ... up to lcores (NULL: the agent's allotted cores).
    lcores: Mapped[int | None] = mapped_column(Integer)
    scaling: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # "auto" lets the agent pick its best backend (and the result says which one it used).
    backend: Mapped[str] = mapped_column(String(8), default="auto")
    repetitions: Mapped[int] = mapped_column(Integer, default=5)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
