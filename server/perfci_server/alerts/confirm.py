"""Confirmation in production: suspected changes get interleaved sessions, detection decides again.

Detection (:mod:`.detection`) hands each series' result here (:meth:`Confirmations.track`) next to
its found changes, then asks for the sessions of the machine x config (:meth:`Confirmations.schedule`):

- every suspect detection reports (``analysis.detect.Suspect``: a likely change it cannot decide,
  or a change found at a range it is locating) is a ``suspects`` row, ``pending``, never an alert;
- the pure policy (``analysis.adaptive.plan``, the one the detection benchmark simulates) picks
  what to measure, within the machine x config budget: extra repetitions of the window's commits <=
  ``confirm_budget_fraction`` x their own (queued jobs count as spent). An unconfirmed suspect gets
  a **session** of its bracket: two ``confirm`` jobs, one per commit (``round`` 1, 2, ... of each),
  linked as partners (``jobs.partner_job_id``) with ``PERFCI_CONFIRM_PAIRS`` repetitions: the claim
  leases both to one agent, which measures them A B A B ... as it measures a pull request's session
  and uploads each side to its own job, each run naming the other job (``runs.paired_with``). A
  change found at a range gets **rounds**: one ``confirm`` job of each commit around it. Both are
  claimed before push jobs, in a seeded random order (``analysis.adaptive.run_order``); the reason
  names the suspect. A suspect waits while one of its jobs is under way;
- the window reads a session's runs with their session key (:mod:`.series_repository`), so
  detection judges them on their own pairs and never counts them in the commits' own level; a
  round's run joins its commit's own repetitions. The upload triggers detection, which decides
  again: a suspect no longer reported is ``confirmed`` when a found change of the series covers its
  commit, ``rejected`` otherwise; one the policy cannot serve any more is ``exhausted``
  (undecided, nothing more measured).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfci_core.analysis import DetectionResult, Kind, Suspect
from perfci_core.analysis.adaptive import Policy, plan, run_order

from ..jobs import repository as job_sql
from ..models import ACTIVE_STATES, BenchConfig, Job, JobPurpose, JobState, SuspectState
from ..models import Suspect as SuspectRow
from ..settings import Settings

log = logging.getLogger(__name__)

OPEN_STATES = (SuspectState.PENDING.value, SuspectState.EXHAUSTED.value)


@dataclass
class Confirmations:
    """The suspects of one branch x machine x config during one detection (under the detection lock)."""

    session: Session
    branch_id: int
    machine_id: int
    config_id: int
    at: dict[str, tuple[int, int]]  # sha -> (commit id, branch position) of the window's commits
    reported: list[tuple[Suspect, SuspectRow]] = field(default_factory=list)
    # Commits whose suspects appeared, moved or changed state: their forge verdicts are written again.
    touched: set[int] = field(default_factory=set)
    _before: dict[int, tuple[str | None, tuple[int, ...]]] = field(default_factory=dict)
    _by_series: dict[tuple[str, str], dict[int, SuspectRow]] | None = None

    def _rows(self) -> dict[tuple[str, str], dict[int, SuspectRow]]:
        """The machine x config's suspect rows by (metric, backend) and commit: one query per
        detection, not one per series (a config has dozens of series)."""
        if self._by_series is None:
            self._by_series = {}
            for r in self.session.scalars(select(SuspectRow).where(
                    SuspectRow.branch_id == self.branch_id, SuspectRow.machine_id == self.machine_id,
                    SuspectRow.config_id == self.config_id)):
                self._by_series.setdefault((r.metric, r.backend), {})[r.suspect_commit_id] = r
        return self._by_series

    def _note(self, row: SuspectRow) -> None:
        """Remember a row's state and commits before this detection touches it."""
        if id(row) not in self._before:
            self._before[id(row)] = (row.state, tuple(row.commit_ids or ()))

    def _touch(self, row: SuspectRow) -> None:
        state, commits = self._before.get(id(row), (None, ()))
        if state != row.state or commits != tuple(row.commit_ids or ()):
            self.touched.update({row.suspect_commit_id, *commits, *(row.commit_ids or ())})

    def track(self, metric: str, backend: str, result: DetectionResult, found_ranges: Sequence[tuple[int, int]],
              judge_from: int) -> None:
        """Record one series' suspects; settle the ones it no longer reports. ``found_ranges``: the
        (last good, first bad] positions of the series' found changes; ``judge_from``: the first
        position the window judged (an older suspect slid out of view and stays as it was)."""
        rows = self._rows().setdefault((metric, backend), {})
        seen: set[int] = set()
        for s in result.suspects:
            commit_id = self.at[s.suspect][0]
            seen.add(commit_id)
            row = rows.get(commit_id)
            if row is None:
                row = SuspectRow(branch_id=self.branch_id, machine_id=self.machine_id, config_id=self.config_id,
                                 metric=metric, backend=backend, suspect_commit_id=commit_id)
                self.session.add(row)
                rows[commit_id] = row
                log.info("suspect: %s %s %+.2f%% of %s/%s at commit %s (config %s)", s.why, s.kind.value, s.percent,
                         metric, backend, commit_id, self.config_id)
            else:
                self._note(row)
            row.commit_ids = [self.at[c][0] for c in s.commits]
            row.why, row.change_pct, row.p_value = s.why, s.percent, s.p_value
            row.direction = s.kind.value if s.kind in (Kind.REGRESSION, Kind.IMPROVEMENT) else "change"
            if row.state not in OPEN_STATES:
                row.state = SuspectState.PENDING.value  # back after it was settled: judged again
            row.reason = f"{s.why}: {s.percent:+.2f}% (p={s.p_value:.2g})"
            self.reported.append((s, row))
        for commit_id, row in rows.items():
            if commit_id in seen or row.state not in OPEN_STATES:
                continue
            self._note(row)
            position = next((p for c, p in self.at.values() if c == commit_id), None)
            if position is None or position < judge_from:
                continue  # out of the window: not judged
            covered = any(lo < position <= hi or abs(position - hi) <= 1 for lo, hi in found_ranges)
            row.state = (SuspectState.CONFIRMED if covered else SuspectState.REJECTED).value
            row.reason = ("detection reports the change" if covered
                          else "the extra repetitions took the evidence away: no change")
            log.info("suspect at commit %s of %s/%s %s", commit_id, metric, backend, row.state)
            self._touch(row)
        self.session.flush()

    def schedule(self, settings: Settings) -> int:
        """Queue the confirmation sessions the policy asks for the suspects tracked; returns how many jobs."""
        try:
            return self._schedule(settings)
        finally:
            for _, row in self.reported:
                self._touch(row)

    def _schedule(self, settings: Settings) -> int:
        if not self.reported:
            return 0
        if not settings.confirm_suspects:
            return 0
        window = [commit_id for commit_id, _ in self.at.values()]
        reps = self.session.scalar(select(BenchConfig.repetitions).where(BenchConfig.id == self.config_id)) or 1
        baseline, spent = job_sql.repetitions_by_purpose(self.session, self.machine_id, self.config_id, window)
        rounds_by_id = job_sql.confirm_rounds(self.session, self.machine_id, self.config_id, window)
        sha_of = {commit_id: sha for sha, (commit_id, _) in self.at.items()}
        waiting = {sha_of[c] for c in self._rounds_under_way(window)}
        policy = Policy(budget_fraction=settings.confirm_budget_fraction, pairs=settings.confirm_pairs,
                        looks=settings.confirm_looks, max_rounds=settings.confirm_max_rounds)
        # Suspects of several metrics of one config share its jobs: one plan over them, strongest first.
        suspects = sorted({s: row for s, row in self.reported}.items(), key=lambda x: x[0].p_value)
        decided = plan([s for s, _ in suspects], {sha_of[c]: r for c, r in rounds_by_id.items()}, spent, baseline,
                       reps, policy, waiting)
        ordered = run_order(decided.requests, (self.machine_id, self.config_id, spent))  # ids are the claim order
        rounds = [(self.at[q.commit][0], q.round, q.reason) for q in ordered]
        added = job_sql.insert_confirm_jobs(self.session, self.machine_id, self.config_id, rounds, settings.max_attempts)
        partners = [((self.at[q.commit][0], q.round), (self.at[q.partner][0], q.partner_round))
                    for q in ordered if q.partner is not None and q.commit < q.partner]
        job_sql.link_partners(self.session, self.machine_id, self.config_id, partners, repetitions=policy.pairs)
        exhausted = set(decided.exhausted)
        for s, row in suspects:
            if s in exhausted:
                row.state = SuspectState.EXHAUSTED.value
                row.reason += (f"; undecided, confirmation stopped: {spent} extra repetitions of {decided.budget} allowed, "
                               f"up to {policy.looks} session(s) of a bracket, {policy.max_rounds} round(s) per commit")
            else:
                row.state = SuspectState.PENDING.value
        if added:
            log.info("confirmation: %d job(s) queued on machine %s config %s (%d extra repetitions spent of %d)",
                     added, self.machine_id, self.config_id, spent, decided.budget)
        self.session.flush()
        return added

    def _rounds_under_way(self, window: Sequence[int]) -> set[int]:
        return set(self.session.scalars(
            select(Job.commit_id).where(
                Job.machine_id == self.machine_id, Job.config_id == self.config_id, Job.commit_id.in_(list(window)),
                Job.purpose == JobPurpose.CONFIRM.value, Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES)))))
