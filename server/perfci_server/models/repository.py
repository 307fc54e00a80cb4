"""Source side: repositories, their branches and commits (with their order on each branch)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, BigId, CreatedAtMixin, IdMixin, utcnow


class Repository(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "repositories"

    # The repository as its forge's deliveries name it (owner/name): how webhooks find us.
    name: Mapped[str] = mapped_column(String(255), unique=True)
    forge: Mapped[str] = mapped_column(String(16))  # a name of forge.registry.KINDS
    clone_url: Mapped[str] = mapped_column(String(1024))
    webhook_secret: Mapped[str] = mapped_column(String(255))
    track_tags: Mapped[bool] = mapped_column(Boolean, default=False)
    # The branch every other branch is judged against (its base) unless a pull request names
    # another; kept up to date from the deliveries (each forge's record reads it).
    default_branch: Mapped[str] = mapped_column(String(255), default="main", server_default="main")

    branches: Mapped[list[Branch]] = relationship(back_populates="repository", lazy="raise")


class Branch(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "branches"
    __table_args__ = (UniqueConstraint("repository_id", "name"),)

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    head_sha: Mapped[str | None] = mapped_column(String(40))
    # A branch other than the default one starts with its base branch's history up to the
    # merge-base (positions 0 .. fork_position), then its own commits: its first commit is judged
    # against the base, and changes at or before fork_position are the base branch's to report.
    base_branch_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("branches.id", ondelete="SET NULL"))
    fork_position: Mapped[int | None] = mapped_column(Integer)

    repository: Mapped[Repository] = relationship(back_populates="branches", lazy="raise")

    @property
    def first_own_position(self) -> int:
        """The first position whose changes this branch reports (0 without a base)."""
        return 0 if self.fork_position is None else self.fork_position + 1


class Commit(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "commits"
    __table_args__ = (UniqueConstraint("repository_id", "sha"), Index("ix_commits_repository_id_patch_id", "repository_id", "patch_id"))

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    sha: Mapped[str] = mapped_column(String(40))
    # From git (the server's mirror); from the push payload's order while the mirror is unavailable.
    parents: Mapped[list[str]] = mapped_column(default=list)
    author_name: Mapped[str] = mapped_column(String(255), default="")
    author_email: Mapped[str] = mapped_column(String(255), default="")
    committed_at: Mapped[datetime | None]
    message: Mapped[str] = mapped_column(Text, default="")
    # git's stable patch id of a commit with one parent (the mirror's): the same change under a new
    # sha (a cherry-pick, a rebase) has the same one. None for merges and until the mirror has it.
    patch_id: Mapped[str | None] = mapped_column(String(40))


class BranchCommit(Base):
    """A commit's position on a branch: series are drawn in this order, not by timestamps."""

    __tablename__ = "branch_commits"
    __table_args__ = (
        UniqueConstraint("branch_id", "position"),
        Index("ix_branch_commits_commit_id", "commit_id"),
    )

    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"), primary_key=True)
    commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    # Placed from a push payload's order while the mirror could not be fetched: provisional until
    # git's order replaces it (repos.service.complete_push).
    guessed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class AbandonedCommit(Base):
    """A commit a force push took off a branch: kept (with its measurements), out of the series.

    Detection, the dashboards and the verdicts read ``branch_commits`` only, so they see the branch
    as git does; this row says where the commit stood and which push abandoned it."""

    __tablename__ = "abandoned_commits"

    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"), primary_key=True)
    commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)  # where it stood on the branch
    push_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("pushes.id", ondelete="SET NULL"))
    abandoned_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(IdMixin, CreatedAtMixin, Base):
    """One accepted delivery; the unique id makes a forge's redelivery a no-op."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("forge", "delivery_id"),
        # /metrics: each forge's deliveries of the last hour and its last one, without reading them all.
        Index("ix_webhook_deliveries_forge_created_at", "forge", "created_at"),
    )

    forge: Mapped[str] = mapped_column(String(16))
    delivery_id: Mapped[str] = mapped_column(String(128))
    event: Mapped[str] = mapped_column(String(64))
    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    ref: Mapped[str | None] = mapped_column(String(255))
    # What became of it: "scheduled", "ignored: <why>", "ping".
    outcome: Mapped[str] = mapped_column(String(255))


class Push(IdMixin, CreatedAtMixin, Base):
    """A push to a branch and whether all its commits are recorded.

    Complete: every first-parent commit of ``before..after`` came from the server's mirror with its
    real parents. Incomplete: the mirror has not been fetched yet (a task after the delivery's
    answer) or could not be; after a failed fetch the commits the payload listed are on the branch
    (forges list at most 20), and the task, then beat, retries until the mirror has them.
    """

    __tablename__ = "pushes"
    __table_args__ = (
        Index("ix_pushes_incomplete", "id", postgresql_where=text("NOT complete"), sqlite_where=text("NOT complete")),
    )

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"))
    delivery_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("webhook_deliveries.id", ondelete="SET NULL"))
    before: Mapped[str | None] = mapped_column(String(40))  # None: a new branch
    after: Mapped[str] = mapped_column(String(40))
    listed_commits: Mapped[int] = mapped_column(Integer, default=0)  # how many the payload listed
    # The payload's commits, oldest first: placed on the branch as a guess only while the mirror
    # cannot be fetched (the push's range from git replaces the guess when it can).
    listed_shas: Mapped[list[str]] = mapped_column(default=list)
    recorded_commits: Mapped[int] = mapped_column(Integer, default=0)  # how many are on the branch from it
    complete: Mapped[bool] = mapped_column(Boolean, default=False)
    fetch_attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    completed_at: Mapped[datetime | None]
