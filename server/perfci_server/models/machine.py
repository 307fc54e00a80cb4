"""Measurement side: machines (hardware fingerprints), the agents on them, and their tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, BigId, CreatedAtMixin, IdMixin


class Machine(IdMixin, CreatedAtMixin, Base):
    """One hardware fingerprint; results are only ever compared within one machine."""

    __tablename__ = "machines"

    # sha256 of the fingerprint, the result document's `machine_id`.
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(128))
    # The result document's `machine` dict: CPU, microcode, kernel, governor, NIC, DPDK, compiler.
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class Agent(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "agents"

    name: Mapped[str] = mapped_column(String(128))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    # sha256 of a 256-bit random token: enough against offline guessing, and constant-cost to check.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    backends: Mapped[list[str]] = mapped_column(default=list)
    version: Mapped[str] = mapped_column(String(64), default="")
    last_seen_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    # Why the agent stopped claiming jobs (its host is no longer the machine it enrolled as), as
    # its last heartbeat said; None while it claims.
    stopped_claiming: Mapped[str | None] = mapped_column(Text)

    machine: Mapped[Machine] = relationship(lazy="raise")


class EnrollmentToken(IdMixin, CreatedAtMixin, Base):
    """Admin-issued, single use: exchanged once for an agent token."""

    __tablename__ = "enrollment_tokens"

    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    note: Mapped[str] = mapped_column(String(255), default="")
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    agent_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("agents.id", ondelete="SET NULL"))


class ApiToken(IdMixin, CreatedAtMixin, Base):
    """Admin/API tokens for mutations (besides the bootstrap PERFCI_ADMIN_TOKEN)."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(128))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None]
