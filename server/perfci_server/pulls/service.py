"""Pull (merge) requests: the head measured against its merge-base, before the merge.

What a pull request gets, per enabled machine x config (CSIT's per-patch verify, Pinpoint's try
jobs): the head and the merge-base measured as interleaved partners on one agent, in rounds of
their own (``round < 0``), so that both sides share the host's state whatever was measured before.
The verdict is the paired test (:func:`perfci_core.analysis.paired.paired_compare`) with the
minimum effect learned from the base branch's series (the exact rule on ``sim``); it goes to the
head commit as a status of its own context (``perfci/pr/<machine>``) and into one comment on the
pull request, edited in place on every new head:

- ``pending`` as soon as the jobs exist (and while another session measures a metric that stayed
  undecided: :mod:`.sessions`), ``failure`` when a metric the catalogue alerts on got worse,
  ``success`` when none did and every one was decided (said "improvement" when one got better),
  ``neutral`` (with the reason) when there is no answer: a side did not build or run, undecided
  after the last session, head = merge-base.
- A new head drops the old head's queued jobs; a close drops them all. The mirror fetch that finds
  the merge-base runs in a task, never in the webhook's request.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.metrics import change_text

from .. import dispatch
from ..configs import repository as config_sql
from ..forge import comments as forge_comments
from ..forge import statuses as forge_statuses
from ..forge.events import PullEvent
from ..jobs import repository as job_sql
from ..markdown_text import escape
from ..machines import repository as machine_sql
from ..models import BenchConfig, CommitState, JobState, Machine, PullRequest, PullState, Repository
from ..repos import mirror
from ..repos.service import store_commits
from ..settings import Settings
from . import repository as pull_sql
from . import sessions

log = logging.getLogger(__name__)

PREPARE_TASK = "perfci.pulls.prepare"
EVALUATE_TASK = dispatch.PULL_EVALUATE_TASK
ACTIVE = (JobState.QUEUED.value, JobState.LEASED.value, JobState.RUNNING.value)


# --- events ---------------------------------------------------------------------------------


def on_event(session: Session, repository: Repository, event: PullEvent, settings: Settings) -> str:
    """Record a pull request event in the webhook's transaction; the work follows in tasks.
    Returns what was done, for the delivery's answer."""
    number, head_sha = event.number, event.head_sha
    title, base_branch, head_branch = event.title[:255], event.base_branch[:255], event.head_branch[:255]
    pr = pull_sql.lock_or_create(session, repository.id, number, {
        "title": title, "base_branch": base_branch, "head_branch": head_branch, "head_sha": head_sha})
    if event.action == "close":
        pr.state = (PullState.MERGED if event.merged else PullState.CLOSED).value
        dropped = pull_sql.drop_queued_jobs(session, pr.id)
        dispatch.send_after_commit(session, EVALUATE_TASK, pr.id)  # ends what was still pending, edits the comment
        return f"pull request #{number} {pr.state}: {dropped} queued job(s) dropped"
    reopened = pr.state != PullState.OPEN.value  # its queued jobs were dropped: measure again
    moved = pr.head_sha != head_sha or pr.base_branch != base_branch
    if pr.head_commit_id is not None and moved:  # what the old head (or base) still awaited will not come
        why = (f"superseded by {head_sha[:12]} before it was measured" if pr.head_sha != head_sha
               else f"the pull request's base changed to {base_branch} before it was measured")
        _end_pending(session, pr, pr.head_commit_id, pr.base_branch, why, settings)
    pr.state, pr.title, pr.head_branch = PullState.OPEN.value, title, head_branch
    if not moved and pr.head_commit_id is not None and not reopened:
        return f"pull request #{number}: head {head_sha[:12]} is measured already"
    dropped = pull_sql.drop_queued_jobs(session, pr.id) if moved else 0
    pr.head_sha, pr.base_branch, pr.base_sha, pr.head_commit_id, pr.base_commit_id = head_sha, base_branch, None, None, None
    pr.waiting_for = "the server's mirror of the repository to have the head"
    dispatch.send_after_commit(session, PREPARE_TASK, pr.id)
    superseded = f"; {dropped} queued job(s) of the previous head dropped" if dropped else ""
    return f"pull request #{number}: head {head_sha[:12]} to be measured against its merge-base{superseded}"


def _end_pending(session: Session, pr: PullRequest, commit_id: int, base_branch: str, why: str, settings: Settings) -> None:
    """Give each machine's verdict on ``commit_id`` that is still pending its final state: nothing
    will measure it any more (GitHub's checks do the same for a superseded head)."""
    subject = forge_statuses.pull_subject(pr.id, base_branch)
    for status in forge_statuses.statuses_of(session, commit_id, subject):
        if status.state == CommitState.PENDING.value:
            forge_statuses.write_verdicts(session, status.machine_id, subject, {commit_id: (CommitState.NEUTRAL, why)}, settings)


# --- prepare (a task: fetch, find the merge-base, queue the pairs) -----------------------------


@dataclass(frozen=True)
class Target:
    repository: Repository  # detached: the fetch runs outside any transaction
    pull_request_id: int
    head_sha: str
    base_branch: str


@dataclass(frozen=True)
class Sides:
    head: mirror.GitCommit
    base: mirror.GitCommit


def target_of(session: Session, pull_request_id: int) -> Target | None:
    pr = session.get(PullRequest, pull_request_id)
    if pr is None or pr.state != PullState.OPEN.value or pr.head_commit_id is not None:
        return None
    repository = session.get(Repository, pr.repository_id)
    assert repository is not None, "a pull request is deleted with its repository"
    session.expunge(repository)
    return Target(repository, pr.id, pr.head_sha, pr.base_branch)


def read_sides(settings: Settings, target: Target, timeout: float) -> Sides:
    """Fetch the mirror (no transaction open) and read the head and its merge-base with the base
    branch. Raises MirrorUnavailable when the mirror lacks either."""
    path = mirror.fetch(settings, target.repository, target.head_sha, timeout)
    base_ref = f"refs/heads/{target.base_branch}"
    fork = mirror.merge_base(path, target.head_sha, base_ref)
    if fork is None:
        raise mirror.MirrorUnavailable(f"no merge-base of {target.head_sha[:12]} and branch {target.base_branch!r} in the mirror")
    head = mirror.first_parent_commits(path, target.head_sha, [], 1)
    base = mirror.first_parent_commits(path, fork, [], 1)
    return Sides(head[0], base[0])


def note_waiting(session: Session, pull_request_id: int, head_sha: str, why: str) -> None:
    pr = pull_sql.lock(session, pull_request_id)
    if pr is not None and pr.head_sha == head_sha and pr.head_commit_id is None:
        pr.waiting_for = why[:2000]


def schedule(session: Session, target: Target, sides: Sides, settings: Settings) -> str:
    """Queue the head and the merge-base as interleaved partners on every enabled machine x config,
    put ``pending`` on the head and the first comment on the pull request."""
    pr = pull_sql.lock(session, target.pull_request_id)
    if pr is None or pr.state != PullState.OPEN.value or pr.head_sha != target.head_sha:
        return "superseded"
    repository = session.get(Repository, pr.repository_id)
    assert repository is not None
    ids = store_commits(session, repository, [sides.head, sides.base])
    pr.head_commit_id, pr.base_commit_id, pr.base_sha, pr.waiting_for = ids[sides.head.sha], ids[sides.base.sha], sides.base.sha, ""
    machines, configs = machine_sql.enabled_ids(session), config_sql.enabled_ids(session)
    if pr.head_commit_id == pr.base_commit_id:
        verdicts = {m: (CommitState.NEUTRAL, "the head is its merge-base: nothing to compare") for m in machines}
    else:
        queued = 0
        for machine_id in machines:
            for config_id in configs:
                queued += _queue_pair(session, pr, machine_id, config_id, settings)
        base12 = pr.base_sha[:12] if pr.base_sha else "?"
        verdicts = {m: (CommitState.PENDING, f"measuring the head against its merge-base {base12}") for m in machines}
        log.info("pull request #%s of %s: %d job(s) queued, head %s against merge-base %s", pr.number, repository.name, queued,
                 pr.head_sha[:12], base12)
    for machine_id, verdict in verdicts.items():
        forge_statuses.write_verdicts(session, machine_id, _subject(pr), {pr.head_commit_id: verdict}, settings)
    forge_comments.write_comment(session, pr, render_comment(session, pr, {m: _Result(*v) for m, v in verdicts.items()}, settings))
    return f"{len(machines)} machine(s) x {len(configs)} config(s)"


def _queue_pair(session: Session, pr: PullRequest, machine_id: int, config_id: int, settings: Settings,
                again: bool = False) -> int:
    """One interleaved session of the head and the merge-base: the first (none yet), or ``again`` one more."""
    assert pr.head_commit_id is not None and pr.base_commit_id is not None
    if not again and pull_sql.has_pair(session, pr.id, pr.head_commit_id, machine_id, config_id):
        return 0
    head_round = pull_sql.next_pull_round(session, pr.head_commit_id, machine_id, config_id)
    base_round = pull_sql.next_pull_round(session, pr.base_commit_id, machine_id, config_id)
    sides = [(pr.base_commit_id, base_round, f"pull request #{pr.number}: merge-base"),
             (pr.head_commit_id, head_round, f"pull request #{pr.number}: head")]
    added = job_sql.insert_pull_jobs(session, pr.id, machine_id, config_id, sides, settings.max_attempts)
    job_sql.link_partners(session, machine_id, config_id, [((pr.base_commit_id, base_round), (pr.head_commit_id, head_round))],
                          repetitions=sessions.session_pairs(session, machine_id, config_id, settings.pull_sessions))
    return added


# --- evaluate (a task, after each of its jobs ends) --------------------------------------------


@dataclass
class _Result:
    state: CommitState
    description: str
    rows: list[sessions.Row] | None = None
    unchanged: int = 0


_ENDED = {PullState.CLOSED.value: "closed before it was measured", PullState.MERGED.value: "merged before it was measured"}


def evaluate(session: Session, pull_request_id: int, settings: Settings) -> str:
    """Decide every machine the head's jobs are done on; write the verdicts and the comment. A
    closed or merged pull request gets no new session: what is still pending ends there."""
    pr = pull_sql.lock(session, pull_request_id)
    if pr is None or pr.head_commit_id is None:
        return "nothing to decide"
    ended = _ENDED.get(pr.state)
    by_machine: dict[int, list[pull_sql.Pair]] = defaultdict(list)
    for pair in pull_sql.pairs_of_head(session, pr.id, pr.head_commit_id):
        by_machine[pair.machine_id].append(pair)
    results = {machine_id: _decide(session, pr, pairs, settings, more_sessions=ended is None)
               for machine_id, pairs in sorted(by_machine.items())}
    pending = {s.machine_id for s in forge_statuses.statuses_of(session, pr.head_commit_id, _subject(pr))
               if s.state == CommitState.PENDING.value}
    for machine_id in pending - set(results):  # nothing measures the head there any more
        results[machine_id] = _Result(CommitState.NEUTRAL, ended or "no verdict: no job measures the head on this machine")
    if ended is not None:
        for machine_id, result in results.items():
            if result.state is CommitState.PENDING:
                results[machine_id] = _Result(CommitState.NEUTRAL, ended, result.rows, result.unchanged)
    for machine_id, result in sorted(results.items()):
        forge_statuses.write_verdicts(session, machine_id, _subject(pr), {pr.head_commit_id: (result.state, result.description)},
                                      settings)
    forge_comments.write_comment(session, pr, render_comment(session, pr, results, settings))
    return ", ".join(f"{m}: {r.state.value}" for m, r in sorted(results.items())) or "nothing to decide"


def _subject(pr: PullRequest) -> forge_statuses.Subject:
    return forge_statuses.pull_subject(pr.id, pr.base_branch)


def _decide(session: Session, pr: PullRequest, pairs: list[pull_sql.Pair], settings: Settings,
            more_sessions: bool = True) -> _Result:
    base12 = (pr.base_sha or "")[:12]
    states = [s for p in pairs for s in (p.head_state, p.base_state)]
    if any(s in ACTIVE for s in states):
        done = sum(s == JobState.DONE.value for s in states)
        again = len(pairs) - len({p.config_id for p in pairs})
        more = f", {again} more session(s) for an undecided metric" if again else ""
        return _Result(CommitState.PENDING,
                       f"measuring the head against its merge-base {base12}: {done} of {len(states)} job(s) done{more}")
    jobs = [j for p in pairs for j in (p.head_job, p.base_job)]
    runs = pull_sql.ok_runs(session, jobs)
    failed = [(p, side) for p in pairs for side, job in (("head", p.head_job), ("merge-base", p.base_job)) if job not in runs]
    if failed:
        pair, side = failed[0]
        job = pair.head_job if side == "head" else pair.base_job
        last = pull_sql.last_runs(session, [job]).get(job)
        what = "did not build" if last is not None and last.status == "build_failed" else "has no result"
        return _Result(CommitState.NEUTRAL, f"no verdict: the {side} {what} ({len(failed)} job(s) without a result)")
    names = _config_names(session, [p.config_id for p in pairs])
    by_config: dict[int, list[sessions.Measured]] = defaultdict(list)  # each config's sessions, oldest first
    for pair in pairs:
        by_config[pair.config_id].append(sessions.Measured(pair, runs[pair.base_job], runs[pair.head_job]))
    rows: list[sessions.Row] = []
    unchanged, margin = 0, 0.0
    undecided_configs = []
    for config_id, measured in by_config.items():
        config_rows, same, within = sessions.compare_sessions(session, pr, measured, names.get(config_id, str(config_id)),
                                                              settings.pull_sessions, len(by_config), settings.pull_equivalence)
        margin = max(margin, within)
        rows += config_rows
        unchanged += same
        if any(r.verdict == "undecided" and _alerts_on(r.metric) for r in config_rows):
            undecided_configs.append(config_id)
    rows.sort(key=_lead_first)
    regressions = [r for r in rows if r.verdict == "regression" and _alerts_on(r.metric)]
    undecided = [r for r in rows if r.verdict == "undecided" and _alerts_on(r.metric)]
    if regressions:
        lead = regressions[0]
        more = f", +{len(regressions) - 1} more" if len(regressions) > 1 else ""
        text = f"regression: {lead.metric} {change_text(lead.change_pct)} ({lead.config}, {lead.backend}){more} vs merge-base {base12}"
        return _Result(CommitState.FAILURE, text, rows, unchanged)
    if undecided:
        again = [c for c in undecided_configs if len(by_config[c]) < settings.pull_sessions] if more_sessions else []
        for config_id in again:  # another session; its jobs keep the verdict pending until they are measured
            _queue_pair(session, pr, pairs[0].machine_id, config_id, settings, again=True)
        if again:
            return _Result(CommitState.PENDING, f"undecided: {undecided[0].metric} after {len(by_config[again[0]])} "
                                                f"session(s); measuring one more (vs merge-base {base12})", rows, unchanged)
        return _Result(CommitState.NEUTRAL, f"undecided: {undecided[0].metric} after {settings.pull_sessions} sessions "
                                            f"(vs merge-base {base12})", rows, unchanged)
    improved = [r for r in rows if r.verdict == "improvement" and _alerts_on(r.metric)]
    if improved:
        more = f", +{len(improved) - 1} more" if len(improved) > 1 else ""
        lead = improved[0]
        return _Result(CommitState.SUCCESS, f"improvement: {lead.metric} {change_text(lead.change_pct)} ({lead.config}, "
                                            f"{lead.backend}){more} vs merge-base {base12}", rows, unchanged)
    within = f": unchanged within ±{100 * margin:.1f}%" if margin else ""
    return _Result(CommitState.SUCCESS, f"no regression against merge-base {base12}{within}", rows, unchanged)


_ORDER = {name: i for i, name in enumerate(catalogue.CATALOGUE)}


def _lead_first(row: sessions.Row) -> tuple[bool, bool, float, int]:
    """Regressions first, then undecided; the largest move first (a move from zero largest), then
    the catalogue's order (a per-packet count before its per-1000-instructions rate)."""
    size = abs(row.change_pct) if math.isfinite(row.change_pct) else math.inf
    return row.verdict != "regression", row.verdict != "undecided", -size, _ORDER.get(row.metric, len(_ORDER))


def _alerts_on(metric: str) -> bool:
    known = catalogue.CATALOGUE.get(metric)
    return known is not None and known.alerts


# --- the comment --------------------------------------------------------------------------------


def render_comment(session: Session, pr: PullRequest, results: dict[int, _Result], settings: Settings) -> str:
    """The pull request's one comment (Markdown): the overall verdict, a table of what moved with
    the lean model's why, and each machine's verdict with a link to its read-only page."""
    worst = _worst([r.state for r in results.values()])
    head, base = pr.head_sha[:12], (pr.base_sha or "")[:12]
    improved = worst is CommitState.SUCCESS and any(r.verdict == "improvement" and _alerts_on(r.metric)
                                                    for result in results.values() for r in result.rows or [])
    lines = [f"### perfci: {'improvement' if improved else _WORDS[worst]} — head `{head}` against merge-base `{base}`", ""]
    if pr.state in _ENDED:
        lines += [f"The pull request was {pr.state}: nothing more is measured for it.", ""]
    if not results:
        lines.append("No enabled machine or benchmark config: nothing is measured.")
    machines = dict(session.execute(select(Machine.id, Machine.name).where(Machine.id.in_(list(results)))).all())
    table = [(machines.get(m, str(m)), row) for m, r in results.items() for row in (r.rows or [])]
    if table:
        lines += ["| machine | config | metric | base | head | change | verdict | why |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {escape(name)} | {escape(r.config)} ({r.backend}) | {r.metric} | {_num(r.base)} | {_num(r.head)} | "
                  f"{change_text(r.change_pct)} | {r.verdict} | {escape(r.why)} |" for name, r in table]
        lines.append("")
    links = {s.machine_id: forge_statuses.page_url(settings, s.public_id)
             for s in forge_statuses.statuses_of(session, pr.head_commit_id, _subject(pr))} if pr.head_commit_id else {}
    for machine_id, result in results.items():
        name = machines.get(machine_id, str(machine_id))
        link = links.get(machine_id)
        verdict = f"[{result.state.value}]({link})" if link else result.state.value
        unchanged = f" · {result.unchanged} metric(s) unchanged" if result.unchanged else ""
        lines.append(f"- **{escape(name)}**: {verdict} — {escape(result.description)}{unchanged}")
    lines += ["", "_perfci measures the head and the merge-base interleaved on each machine and edits this comment "
                  "on every push to the pull request._"]
    return "\n".join(lines)


_WORDS = {CommitState.FAILURE: "regression", CommitState.SUCCESS: "no regression", CommitState.PENDING: "measuring",
          CommitState.NEUTRAL: "no verdict"}


def _worst(states: list[CommitState]) -> CommitState:
    for state in (CommitState.FAILURE, CommitState.PENDING, CommitState.NEUTRAL):
        if state in states:
            return state
    return CommitState.SUCCESS if states else CommitState.NEUTRAL


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "—"


def _config_names(session: Session, ids: list[int]) -> dict[int, str]:
    return dict(session.execute(select(BenchConfig.id, BenchConfig.name).where(BenchConfig.id.in_(ids))).all())
