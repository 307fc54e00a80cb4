"""Repositories and what a push adds to them (commits, their order on a branch)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from .. import dispatch
from ..errors import Conflict, NotFound
from ..forge.events import PushedCommit
from ..jobs.service import schedule_commits
from ..models import Branch, Push, Repository, utcnow
from ..security import new_webhook_secret
from ..settings import Settings
from . import mirror
from . import repository as repo_sql
from .schemas import RepositoryCreate

log = logging.getLogger(__name__)


def create_repository(session: Session, data: RepositoryCreate) -> Repository:
    if repo_sql.by_name(session, data.name) is not None:
        raise Conflict(f"repository {data.name!r} already exists")
    repository = Repository(
        name=data.name,
        forge=data.forge.value,
        clone_url=data.clone_url,
        webhook_secret=data.webhook_secret or new_webhook_secret(),
        track_tags=data.track_tags,
        default_branch=data.default_branch,
    )
    session.add(repository)
    session.flush()
    return repository


def get_repository(session: Session, repository_id: int) -> Repository:
    repository = repo_sql.by_id(session, repository_id)
    if repository is None:
        raise NotFound(f"no repository {repository_id}")
    return repository


COMPLETE_PUSH_TASK = "perfci.repos.complete_push"


def record_push(
    session: Session,
    repository: Repository,
    branch_name: str,
    before: str | None,
    after: str,
    listed: Sequence[PushedCommit],
    settings: Settings,
    delivery_id: int | None = None,
) -> Push:
    """Record a push in the caller's transaction without waiting on the forge: the delivery, the
    commits the payload lists (first sighting wins) and the push; :func:`complete_push` (a task
    sent after commit, retried with backoff, then beat's sweep) fetches the server's mirror and
    puts the push's range from git on the branch, with its jobs. While the mirror cannot be
    fetched, :func:`place_listed` puts the payload's commits there instead, as a guess.

    A webhook is answered in the time of a few statements whatever the forge does: the fetch
    happens in the task, which holds no branch lock and no database connection while it runs.
    """
    branch = repo_sql.lock_branch(session, repository.id, branch_name)
    store_commits(session, repository, listed, _payload_parents(before, listed))
    push = Push(repository_id=repository.id, branch_id=branch.id, delivery_id=delivery_id, before=before, after=after,
                listed_commits=len(listed), listed_shas=[c.sha for c in listed], recorded_commits=0, complete=False,
                fetch_attempts=0)
    branch.head_sha = after
    session.add(push)
    session.flush()
    dispatch.send_after_commit(session, COMPLETE_PUSH_TASK, push.id)
    return push


def place_listed(session: Session, push: Push, settings: Settings) -> list[int]:
    """The payload's commits on the branch (each one's parent taken to be the one listed before
    it), with their jobs: what is measured while the mirror cannot be fetched. Idempotent."""
    branch = session.get(Branch, push.branch_id)
    assert branch is not None, "a push's branch is deleted with it"
    repo_sql.lock_branch(session, push.repository_id, branch.name)
    ids = repo_sql.commit_ids(session, push.repository_id, push.listed_shas)
    placed = repo_sql.place_on_branch(session, branch.id, ids)
    repo_sql.mark_guessed(session, branch.id, placed)  # git's order replaces them once the mirror answers
    push.recorded_commits += len(placed)
    schedule_commits(session, ids, settings)
    return placed


@dataclass(frozen=True)
class FetchTarget:
    repository: Repository  # detached: the fetch runs outside any transaction
    after: str


def fetch_target(session: Session, push_id: int) -> FetchTarget | None:
    """What an incomplete push needs fetched (None: it is complete, or gone)."""
    push = session.get(Push, push_id)
    if push is None or push.complete:
        return None
    repository = get_repository(session, push.repository_id)
    session.expunge(repository)
    return FetchTarget(repository, push.after)


def note_fetch_failure(session: Session, push_id: int, error: str, settings: Settings) -> None:
    """A fetch failed: say why on the push, and measure the payload's commits meanwhile (the first
    time)."""
    push = repo_sql.lock_push(session, push_id)
    if push is not None and not push.complete:
        push.fetch_attempts += 1
        push.last_error = error
        # Once, at the first failure: the listed commits get the jobs a push gives them; a machine
        # that enrols later gets history by backfill, not by every retry of this push.
        placed = place_listed(session, push, settings) if push.fetch_attempts == 1 else []
        log.warning("push %d is incomplete after %d fetch attempt(s), %d listed commit(s) placed meanwhile: %s", push.id,
                    push.fetch_attempts, len(placed), error)


def complete_push(session: Session, push: Push, settings: Settings) -> list[int]:
    """Record an incomplete push from the mirror, which the caller fetched (outside any
    transaction): every first-parent commit of ``before..after`` with git's parents, the ones the
    payload did not list placed where they belong, and the push's baseline, with their jobs.
    Returns the commits added; [] (still incomplete) when the mirror lacks the pushed head.

    Commits placed from payloads while the mirror could not be fetched (this push's or any other's)
    are provisional: they come off the branch first, and every incomplete push of the branch the
    mirror can now complete is recorded from git in the same transaction, so the branch is in git's
    order whatever was guessed meanwhile (a forced push's abandoned commits leave it too), and its
    detection runs again over the order git gives."""
    repository = get_repository(session, push.repository_id)
    branch = session.get(Branch, push.branch_id)
    assert branch is not None, "a push's branch is deleted with it"
    repo_sql.lock_branch(session, repository.id, branch.name)
    path = mirror.mirror_path(settings, repository.id)
    if not mirror.has_commit(path, push.after):
        push.fetch_attempts += 1
        push.last_error = f"the mirror has no commit {push.after} yet"
        return []
    guesses = repo_sql.take_guesses_off(session, branch.id)
    pushes = [push]
    if guesses:
        pushes += [p for p in repo_sql.incomplete_pushes_of(session, branch.id, push.id) if mirror.has_commit(path, p.after)]
        pushes.sort(key=lambda p: p.id)
        dispatch.send_after_commit(session, dispatch.REDETECT_BRANCH_TASK, branch.id)
        log.info("branch %s of %s: %d commit(s) placed from payloads taken off; %d push(es) recorded from git instead",
                 branch.name, repository.name, len(guesses), len(pushes))
    added: list[int] = []
    for each in pushes:
        placed = _complete(session, repository, branch, each, path, settings, set(guesses))
        if each is push:
            added = placed
    return added


def _complete(session: Session, repository: Repository, branch: Branch, push: Push, path: Path, settings: Settings,
              guessed: set[int]) -> list[int]:
    """Record one push from the mirror; returns the commits it added to the branch (a commit that
    stood there as a guess is not new)."""
    push.fetch_attempts += 1
    fresh = push.before is None and branch.fork_position is None and repo_sql.first_push_of(session, branch.id) == push.id
    try:
        base = _base_of(session, repository, branch, path, push.after) if fresh else None
        commits = _pushed_commits(session, settings, repository, branch.id, path, push.before, push.after, base, push.listed_shas)
    except mirror.MirrorUnavailable as exc:
        push.last_error = str(exc)
        return []
    abandoned = _abandoned(session, path, branch.id, push.after)
    if abandoned:  # a force push: the branch is what git says it is now
        repo_sql.abandon(session, branch.id, abandoned, push.id)
        dispatch.send_after_commit(session, dispatch.FORGET_ABANDONED_TASK, branch.id, [c for c, _ in abandoned])
        log.info("push %d (%s %s) was forced: %d commit(s) taken off the branch (kept as abandoned)", push.id,
                 repository.name, branch.name, len(abandoned))
    ids, placed = _place_with_baseline(session, settings, repository, branch, base, path, push.after, commits)
    placed = [c for c in placed if c not in guessed]
    if placed and repo_sql.newest_shas(session, branch.id, 1) != [push.after]:
        # Completed after a later push of the branch: its commits went in before that one's, so the
        # verdicts and alerts given after them ("no baseline yet") are decided again in git's order.
        dispatch.send_after_commit(session, dispatch.REDETECT_BRANCH_TASK, branch.id)
    single = [c.sha for c in commits if len(c.parents) == 1]
    repo_sql.set_patch_ids(session, repository.id, mirror.patch_ids(path, single))  # a copy of a change is known as one
    schedule_commits(session, ids, settings)
    push.recorded_commits += len(placed)
    push.complete, push.completed_at, push.last_error = True, utcnow(), None
    log.info("push %d (%s %s) completed from the mirror: %d commit(s) the payload did not list", push.id, repository.name,
             branch.name, len(placed))
    return placed


def _base_of(session: Session, repository: Repository, branch: Branch, path: Path, after: str) -> Branch | None:
    """The branch a new branch is judged against: the tracked branch it forked from. That is the one
    whose merge-base with the pushed head is the newest (a branch stacked on a feature branch starts
    from that feature branch, not from the default branch), the default branch on a tie; a branch
    that already holds the pushed head is no base (it was pushed from this one). None for the
    default branch, or when no other branch is tracked."""
    if branch.name == repository.default_branch:
        return None
    best: tuple[int, bool, int] | None = None
    chosen = None
    for other in repo_sql.branches_with_heads(session, repository.id, branch.id):
        if not other.head_sha or not mirror.has_commit(path, other.head_sha):
            continue
        fork = mirror.merge_base(path, after, other.head_sha)
        if fork is None or fork == after:
            continue
        rank = (mirror.depth(path, fork), other.name == repository.default_branch, -other.id)
        if best is None or rank > best:
            best, chosen = rank, other
    return chosen


def _pushed_commits(session: Session, settings: Settings, repository: Repository, branch_id: int, path: Path,
                    before: str | None, after: str, base: Branch | None, listed: Sequence[str] = ()) -> list[mirror.GitCommit]:
    """The push's first-parent commits, oldest first: since the branch's newest recorded commit
    that git has before ``after``, else since ``before``, else since the base branch, else what no
    other branch has, and at least what the payload lists. Up to the branch's newest recorded commit that ``after`` leads to, when pushes completed out of order put
    a later one there first: its known commits anchor the missing ones in git's order
    (``place_on_branch`` inserts them before the first known one)."""
    newest = repo_sql.newest_shas(session, branch_id, RECORDED_LOOKBACK)
    top = next((sha for sha in newest if mirror.has_commit(path, sha) and mirror.is_ancestor(path, after, sha)), after)
    # The newest commit recorded before this push (the pushed head itself may stand there already, put
    # there by a later push completed first: its range and its baseline are still this push's to record).
    recorded = next((sha for sha in newest if sha != after and mirror.has_commit(path, sha) and mirror.is_ancestor(path, sha, after)),
                    None)
    if recorded is not None:
        exclude = [recorded]
    elif before and mirror.has_commit(path, before):
        exclude = [before]
    elif base is not None:  # a new branch: its commits since it left its base
        exclude = [base.head_sha or ""]
    else:  # a new branch with no base (or a head git no longer has): what no other branch has recorded yet
        exclude = repo_sql.branch_tips(session, repository.id, branch_id)
        # ... and at least what its payload lists: another branch's head may hold those in git
        # without having recorded them (a feature branch's push completed before main's first)
        oldest = next((sha for sha in listed if mirror.has_commit(path, sha) and mirror.is_ancestor(path, sha, after)), None)
        if oldest is not None and any(mirror.has_commit(path, tip) and mirror.is_ancestor(path, oldest, tip) for tip in exclude):
            exclude = mirror.first_parent_commits(path, oldest, [], 1)[0].parents
    commits = mirror.first_parent_commits(path, top, exclude, settings.push_max_commits)
    if not commits:  # a branch or tag created at a commit already known: that commit
        commits = mirror.first_parent_commits(path, after, [], 1)
    elif len(commits) == settings.push_max_commits:
        log.warning("push to %s at %s: only the newest %d first-parent commits recorded (PERFCI_PUSH_MAX_COMMITS)",
                    repository.name, after, len(commits))
    return commits


RECORDED_LOOKBACK = 200  # the branch's newest commits searched for the one a push continues


def _abandoned(session: Session, path: Path, branch_id: int, after: str) -> list[tuple[int, int]]:
    """(commit id, position) of the branch's newest commits a force push left behind: newer than
    the newest one ``after`` descends from, and neither its ancestors nor its descendants (a later
    push completed first) in git."""
    out = []
    for commit_id, sha, position in repo_sql.newest_entries(session, branch_id, RECORDED_LOOKBACK):
        known = mirror.has_commit(path, sha)
        if known and mirror.is_ancestor(path, sha, after):
            break  # from here back, the branch is the pushed head's history
        if known and mirror.is_ancestor(path, after, sha):
            continue
        out.append((commit_id, position))
    return out


def _place_with_baseline(session: Session, settings: Settings, repository: Repository, branch: Branch, base: Branch | None,
                         path: Path, after: str, commits: Sequence[mirror.GitCommit]) -> tuple[list[int], list[int]]:
    """Place the push's commits and make sure the oldest has a baseline: the commit before it on
    the branch's series, measured with them, so that no commit is judged against nothing.

    - The branch has a commit before them: that one.
    - A new branch with a base: the base's history up to the merge-base comes first (the newest
      ``detection_window_commits`` of it), so the branch's first commit is judged against its base;
      the merge-base is the baseline.
    - Otherwise (a repository's first push): the oldest commit's parent in git, when it has one.

    Returns (the ids to schedule: the baseline then the push's commits; the push's commits newly
    placed, the baseline not counted)."""
    ids, placed = _place(session, repository, branch, commits, parents={c.sha: c.parents for c in commits})
    if not ids:
        return ids, placed
    previous = repo_sql.commit_before(session, branch.id, ids[0])
    if previous is not None:
        return [previous, *ids], placed
    lead: list[int] = []
    fork = mirror.merge_base(path, after, base.head_sha) if base is not None and base.head_sha else None
    if base is not None and fork is not None:
        fork_id = store_commits(session, repository, mirror.first_parent_commits(path, fork, [], 1))[fork]
        at = repo_sql.position_of(session, base.id, fork_id)
        lead = [fork_id] if at is None else repo_sql.history_until(session, base.id, at, settings.detection_window_commits)
        branch.base_branch_id = base.id
    elif commits[0].parents:
        parent = commits[0].parents[0]
        lead = [store_commits(session, repository, mirror.first_parent_commits(path, parent, [], 1))[parent]]
    if not lead:
        return ids, placed
    repo_sql.place_on_branch(session, branch.id, [*lead, *ids])  # before the push's commits
    if branch.base_branch_id is not None:
        branch.fork_position = repo_sql.position_of(session, branch.id, lead[-1])
        log.info("branch %s of %s starts from %s at %s (%d commit(s) of its history)", branch.name, repository.name,
                 base.name if base else "?", fork, len(lead))
    return [lead[-1], *(i for i in ids if i != lead[-1])], placed


def _payload_parents(before: str | None, listed: Sequence[PushedCommit]) -> dict[str, list[str]]:
    # The payload has no parents: each commit's is taken to be the one listed before it.
    parents, parent = {}, before
    for c in listed:
        parents[c.sha] = [parent] if parent else []
        parent = c.sha
    return parents


def _place(session: Session, repository: Repository, branch: Branch, commits: Sequence[PushedCommit | mirror.GitCommit],
           parents: dict[str, list[str]]) -> tuple[list[int], list[int]]:
    """Store the commits (first sighting wins, but git's parents replace guessed ones) and put them
    on the branch in order; returns (all their ids in order, the ids newly placed on the branch)."""
    ids_by_sha = store_commits(session, repository, commits, parents)
    ids = list(dict.fromkeys(ids_by_sha[c.sha] for c in commits))
    return ids, repo_sql.place_on_branch(session, branch.id, ids)


def store_commits(session: Session, repository: Repository, commits: Sequence[PushedCommit | mirror.GitCommit],
           parents: dict[str, list[str]] | None = None) -> dict[str, int]:
    """Store the commits (first sighting wins; git's parents replace guessed ones); sha -> id.
    ``parents`` defaults to the commits' own (git commits from the mirror)."""
    if parents is None:
        parents = {c.sha: c.parents for c in commits if isinstance(c, mirror.GitCommit)}
    rows = [
        {
            "repository_id": repository.id,
            "sha": c.sha,
            "parents": parents[c.sha],
            "author_name": c.author_name[:255],
            "author_email": c.author_email[:255],
            "committed_at": c.committed_at,
            "message": c.message,
            "created_at": utcnow(),
        }
        for c in commits
    ]
    ids_by_sha = repo_sql.ensure_commits(session, rows)
    if commits and isinstance(commits[0], mirror.GitCommit):
        repo_sql.set_parents(session, {ids_by_sha[c.sha]: parents[c.sha] for c in commits})
    return ids_by_sha
