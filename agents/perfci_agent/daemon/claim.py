"""The part of the server's claim answer (``ClaimedJob``) the agent uses: one job, or two leased
together to be measured interleaved in one session (:mod:`.paired`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from perfci_core.result import BenchConfig


class Partner(BaseModel):
    """The second job of a paired claim, leased to the agent with the first."""

    model_config = ConfigDict(extra="ignore")

    job_id: int
    attempt: int
    commit: str


class Claim(BaseModel):
    """The part of the server's ClaimedJob the agent uses."""

    model_config = ConfigDict(extra="ignore")

    job_id: int
    attempt: int
    lease_seconds: int
    clone_url: str
    commit: str
    config: BenchConfig
    backend: str
    repetitions: int
    partner: Partner | None = None  # set: both jobs are leased to us, to be measured interleaved
    pair_seed: int | None = None  # the pair order's seed (drawn by the server, so the order can be replayed)

    @property
    def label(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} commit {self.commit[:12]} config {self.config.name}"

    def partner_job(self) -> Claim:
        """The partner as a job of its own: everything the same but its id, attempt and commit."""
        assert self.partner is not None
        return self.model_copy(update={"job_id": self.partner.job_id, "attempt": self.partner.attempt,
                                       "commit": self.partner.commit, "partner": None, "pair_seed": None})
