"""The pieces of a paired claim: the two commits either side of a suspected change, measured
interleaved in one session (:func:`perfci_agent.interleave.interleave`), one job row per commit.

The server leases both jobs to one agent; each is still renewed, failed, released and uploaded on
its own, with its own (job_id, attempt). The claimed job is interleave's ``base``, its partner the
``head``. The agent's loop is in :mod:`.agent`; this module holds what it needs to tell the two
sides apart and to log them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from perfci_core.result import ResultDocument

from .claim import Claim
from .lease import LeaseRenewer

log = logging.getLogger("perfci_agent.daemon")
# interleave's reason for the side it did not measure because the other side's build or first run failed
NOT_MEASURED = "not measured:"


@dataclass
class Side:
    """One job of the pair: ``name`` is its side in interleave (``base``/``head``)."""

    name: str
    job: Claim
    lease: LeaseRenewer

    @property
    def held(self) -> bool:
        return self.lease.lost is None


def not_measured(doc: ResultDocument) -> bool:
    """True for the side interleave left out because of the other side: it has nothing of its own
    to report, and uploading it would use up one of its attempts."""
    return doc.status == "run_failed" and not doc.samples and (doc.reason or "").startswith(NOT_MEASURED)


class PairLog:
    """interleave's progress events as log lines with durations, each under its job's label."""

    def __init__(self, sides: list[Side]) -> None:
        self.labels = {side.name: side.job.label for side in sides}
        self.mark = time.monotonic()
        self.backend_logged: set[str] = set()
        self.runs = 0

    def _lap(self) -> float:
        now = time.monotonic()
        lap, self.mark = now - self.mark, now
        return lap

    def __call__(self, event: str, **kw: Any) -> None:
        label = self.labels.get(kw.get("side", ""), "pair")
        if event == "build":
            self._lap()
            log.info("%s: build", label)
        elif event == "build_step":
            log.info("%s: build: %s", label, kw["step"])
        elif event == "built":
            log.info("%s: build %s in %.1f s", label, "cached" if kw["cached"] else "done", self._lap())
        elif event == "measure_backend" and kw["side"] not in self.backend_logged:  # every run says it: once per side
            self.backend_logged.add(kw["side"])
            log.info("%s: backend %s (%s)", label, kw["backend"], kw["reason"])
        elif event == "measure_reused":
            log.info("%s: pair %d: sim counts reused from commit %s (the same binary, config and tool)", label,
                     kw["pair"] + 1, kw["commit"][:12])
        elif event == "run":
            lap = self._lap()
            after = f" (the previous run took {lap:.1f} s)" if self.runs else ""
            self.runs += 1
            log.info("%s: pair %d/%d%s", label, kw["pair"] + 1, kw["pairs"], after)
        elif event == "done":
            log.info("%s: %d pair(s) done (the last run took %.1f s)", " + ".join(self.labels.values()), kw["pairs"], self._lap())
