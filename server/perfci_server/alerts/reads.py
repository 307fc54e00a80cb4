"""Reads of alert groups and suspects in the API's shape, triage, and the CI gate's check."""

from __future__ import annotations

import logging
from collections import defaultdict

from sqlalchemy.orm import Session

from ..errors import NotFound
from ..models import Alert, AlertGroup, BenchConfig, Branch, Commit, CommitState, Creep, Machine, Repository, utcnow
from ..models import Suspect as SuspectRow
from ..pagination import Page
from ..repos import repository as repo_sql
from ..settings import Settings
from . import explanation, verdicts
from . import repository as alert_sql
from . import series_repository as series_sql
from .schemas import AlertGroupRead, AlertRead, CheckResult, CheckState, CommitRef, CreepRead, MachineVerdict, SuspectRead, Triage

log = logging.getLogger(__name__)

SIM_FAMILY_KEY = "sim.hz_family."  # the raw key a sim sample records its store-buffer model under


def read_groups(session: Session, groups: list[AlertGroup]) -> list[AlertGroupRead]:
    """The API shape of groups, with every name and commit loaded in a few batch queries."""
    if not groups:
        return []
    alerts = alert_sql.alerts_of_groups(session, [g.id for g in groups])
    by_group: dict[int, list[Alert]] = defaultdict(list)
    for a in alerts:
        by_group[a.group_id].append(a)
    commit_ids = [c for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
    commit_ids += [c for a in alerts for c in (a.last_good_commit_id, a.first_bad_commit_id)]
    commit_ids += [c for g in groups for c in (g.origin_commit_id, g.awaiting_commit_id)]
    commits = alert_sql.commits_by_id(session, commit_ids)
    branch_of = {g.id: g.branch_id for g in groups}
    positions = alert_sql.branch_positions(session, [(g.branch_id, c) for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
                                           + [(branch_of[a.group_id], a.first_bad_commit_id) for a in alerts])
    repos = alert_sql.names(session, Repository, [g.repository_id for g in groups])
    branches = alert_sql.names(session, Branch, [g.branch_id for g in groups])
    machines = alert_sql.names(session, Machine, [g.machine_id for g in groups])
    configs = alert_sql.names(session, BenchConfig, [a.config_id for a in alerts])

    def ref(group: AlertGroup, commit_id: int | None, author: bool) -> CommitRef | None:
        if commit_id is None:
            return None
        return commit_ref(commits[commit_id], positions.get((group.branch_id, commit_id)), author)

    families: dict[tuple[int, int, int, int], str | None] = {}

    def family_of(group: AlertGroup, alert: Alert) -> str | None:
        """The store-buffer model the first bad commit's sim sample recorded (its raw sim.hz_family.<name>)."""
        position = positions.get((group.branch_id, alert.first_bad_commit_id))
        key = (group.branch_id, group.machine_id, alert.config_id, alert.first_bad_commit_id)
        if key not in families:
            raw = series_sql.sim_sample_raw(session, *key[:3], position) if position is not None else {}
            families[key] = next((k.removeprefix(SIM_FAMILY_KEY) for k in raw if k.startswith(SIM_FAMILY_KEY)), None)
        return families[key]

    out = []
    for g in groups:
        members = sorted(by_group[g.id], key=lambda a: (configs.get(a.config_id, ""), a.metric, a.backend))
        first_bad = ref(g, g.first_bad_commit_id, author=True)
        assert first_bad is not None
        out.append(AlertGroupRead(
            id=g.id, repository_id=g.repository_id, repository=repos.get(g.repository_id, ""), branch=branches.get(g.branch_id, ""),
            machine_id=g.machine_id, machine=machines.get(g.machine_id, ""), direction=g.direction, status=g.status,
            last_good=ref(g, g.last_good_commit_id, author=False), first_bad=first_bad, summary=g.summary,
            explanation=g.explanation, triage_note=g.triage_note, triaged_by=g.triaged_by, triaged_at=g.triaged_at,
            created_at=g.created_at, updated_at=g.updated_at,
            origin_sha=commits[g.origin_commit_id].sha if g.origin_commit_id else None, origin_group_id=g.origin_group_id,
            awaiting_sha=commits[g.awaiting_commit_id].sha if g.awaiting_commit_id else None,
            alerts=[AlertRead(
                config=configs.get(a.config_id, ""), metric=a.metric, backend=a.backend, direction=a.direction,
                before_median=a.before_median, after_median=a.after_median, change_pct=a.change_pct,
                confidence=a.confidence, p_value=a.p_value,
                last_good_sha=commits[a.last_good_commit_id].sha if a.last_good_commit_id else None,
                first_bad_sha=commits[a.first_bad_commit_id].sha,
                sim_family=family_of(g, a) if a.backend == "sim" else None,
            ) for a in members],
        ))
    return out


def read_suspects(session: Session, rows: list[SuspectRow]) -> list[SuspectRead]:
    """The API shape of suspects, names and commits loaded in batch queries."""
    if not rows:
        return []
    commits = alert_sql.commits_by_id(session, [c for r in rows for c in (r.suspect_commit_id, *r.commit_ids)])
    positions = alert_sql.branch_positions(session, [(r.branch_id, r.suspect_commit_id) for r in rows])
    branches = alert_sql.names(session, Branch, [r.branch_id for r in rows])
    machines = alert_sql.names(session, Machine, [r.machine_id for r in rows])
    configs = alert_sql.names(session, BenchConfig, [r.config_id for r in rows])
    out = []
    for r in rows:
        c = commits[r.suspect_commit_id]
        out.append(SuspectRead(
            id=r.id, state=r.state, why=r.why, direction=r.direction, branch=branches.get(r.branch_id, ""),
            machine_id=r.machine_id, machine=machines.get(r.machine_id, ""), config=configs.get(r.config_id, ""),
            metric=r.metric, backend=r.backend, change_pct=r.change_pct, p_value=r.p_value,
            suspect=commit_ref(c, positions.get((r.branch_id, r.suspect_commit_id))),
            commits=[commits[i].sha for i in r.commit_ids if i in commits],
            confirm_jobs=alert_sql.active_confirm_jobs(session, r.machine_id, r.config_id, r.commit_ids),
            reason=r.reason, created_at=r.created_at, updated_at=r.updated_at,
        ))
    return out


def read_suspect_page(session: Session, page: Page[SuspectRow]) -> Page[SuspectRead]:
    return Page(items=read_suspects(session, page.items), total=page.total, limit=page.limit, offset=page.offset)


def read_creep_page(session: Session, page: Page[Creep]) -> Page[CreepRead]:
    """The API shape of a page of creeps, names and commits loaded in batch queries."""
    rows = page.items
    ends = [(r.branch_id, c) for r in rows for c in (r.first_commit_id, r.last_commit_id)]
    commits = alert_sql.commits_by_id(session, [c for _, c in ends])
    positions = alert_sql.branch_positions(session, ends)
    branches = alert_sql.names(session, Branch, [r.branch_id for r in rows])
    machines = alert_sql.names(session, Machine, [r.machine_id for r in rows])
    configs = alert_sql.names(session, BenchConfig, [r.config_id for r in rows])
    items = []
    for r in rows:
        first, last = (positions.get((r.branch_id, c)) for c in (r.first_commit_id, r.last_commit_id))
        items.append(CreepRead(
            id=r.id, direction=r.direction, branch=branches.get(r.branch_id, ""), machine_id=r.machine_id,
            machine=machines.get(r.machine_id, ""), config=configs.get(r.config_id, ""), metric=r.metric, backend=r.backend,
            change_pct=r.change_pct, p_value=r.p_value, first=commit_ref(commits[r.first_commit_id], first),
            last=commit_ref(commits[r.last_commit_id], last), commits=None if first is None or last is None else last - first + 1,
            created_at=r.created_at, updated_at=r.updated_at))
    return Page(items=items, total=page.total, limit=page.limit, offset=page.offset)


def commit_ref(c: Commit, position: int | None, author: bool = True) -> CommitRef:
    return CommitRef(sha=c.sha, position=position, subject=explanation.subject(c.message),
                     author=(f"{c.author_name} <{c.author_email}>" if c.author_email else c.author_name) if author else "")


def read_page(session: Session, page: Page[AlertGroup]) -> Page[AlertGroupRead]:
    return Page(items=read_groups(session, page.items), total=page.total, limit=page.limit, offset=page.offset)


def get_group(session: Session, group_id: int) -> AlertGroupRead:
    group = alert_sql.group_by_id(session, group_id)
    if group is None:
        raise NotFound(f"no alert group {group_id}")
    return read_groups(session, [group])[0]


# --- triage and the CI check ----------------------------------------------------------------


def triage(session: Session, group_id: int, data: Triage, settings: Settings) -> AlertGroupRead:
    """Set a group's triage state; the commit statuses of its range follow (success once no
    untriaged regression implicates a commit)."""
    group = alert_sql.group_by_id(session, group_id, lock=True)
    if group is None:
        raise NotFound(f"no alert group {group_id}")
    group.status, group.triage_note, group.triaged_by = data.status.value, data.note, data.by
    group.triaged_at = utcnow()
    session.flush()
    lg, fb = explanation.candidate_span(session, group)
    commits = series_sql.commits_at(session, group.branch_id, lg, fb)
    verdicts.record_verdicts(session, group.machine_id, commits, settings)
    for sighting in alert_sql.sightings_of(session, [group.id]):  # a copy of the change follows its triage
        verdicts.record_verdicts(session, sighting.machine_id, alert_sql.range_commits(session, sighting), settings)
    log.info("alert group %s triaged %s by %s", group.id, group.status, group.triaged_by)
    return read_groups(session, [group])[0]


def branch_id_of(session: Session, repository_id: int, branch: str) -> int:
    row = repo_sql.branch(session, repository_id, branch)
    if row is None:
        raise NotFound(f"no branch {branch!r} in repository {repository_id}")
    return row.id


def check(session: Session, sha: str, repository: str | None, machine: str | None) -> CheckResult:
    """The CI gate's answer for one commit (see CheckResult)."""
    commits = alert_sql.commits_with_sha(session, sha, repository)
    machine_ids = alert_sql.machine_ids(session, machine)
    if machine_ids == []:
        raise NotFound(f"no machine named {machine!r}")
    if not commits:
        where = f" in repository {repository!r}" if repository else ""
        return CheckResult(commit=sha, state=CheckState.PENDING, exit_code=2, machines=[], pending_jobs=0, regressions=[],
                           detail=f"commit {sha} is not known{where} yet (no push delivered it)")
    commit_ids = [c.id for c in commits]
    regressions = read_groups(session, [g for g in alert_sql.implicating_groups(session, commit_ids, machine_ids)
                                        if g.origin_commit_id is None and g.awaiting_commit_id is None])
    pending = alert_sql.active_jobs(session, commit_ids, machine_ids)
    suspects = read_suspects(session, alert_sql.pending_suspects(session, commit_ids, machine_ids))
    verdicts = [MachineVerdict(machine_id=s.machine_id, machine=name, state=s.state, description=s.description)
                for s, name in alert_sql.verdicts(session, commit_ids, machine_ids)]
    if regressions:
        state, detail = CheckState.REGRESSED, "; ".join(f"alert {g.id}: {g.summary}" for g in regressions)
    elif suspects:  # not an alert yet, not clean either: the confirmation rounds decide
        state = CheckState.PENDING
        detail = "suspected change being confirmed: " + "; ".join(
            f"{s.direction} {s.change_pct:+.2f}% of {s.config} {s.metric}/{s.backend} at {s.suspect.sha[:12]} on {s.machine} "
            f"({s.confirm_jobs} confirmation job(s) queued or running)" for s in suspects)
    elif pending or not verdicts:
        state = CheckState.PENDING
        detail = f"{pending} job(s) still queued or running" if pending else "no analysed result for this commit yet"
    elif undecided := [v for v in verdicts if v.state in (CommitState.PENDING.value, CommitState.NEUTRAL.value)]:
        state = CheckState.PENDING  # nothing to compare with yet: not clean by absence
        detail = "; ".join(f"{v.machine}: {v.description}" for v in undecided)
    else:
        state, detail = CheckState.CLEAN, f"no untriaged regression on {len(verdicts)} machine(s)"
    exit_code = {CheckState.REGRESSED: 1, CheckState.CLEAN: 0, CheckState.PENDING: 2}[state]
    return CheckResult(commit=sha, state=state, exit_code=exit_code, detail=detail, machines=verdicts, pending_jobs=pending,
                       regressions=regressions, pending_suspects=suspects)
