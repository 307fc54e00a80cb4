"""Result ingest (validate, check it belongs to the attempt, store every sample) and the reads
built on it: a metric's series along a branch and the comparison of two commits."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Row
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis.compare import compare as two_sample_verdict
from perfci_core.analysis.detect import Settings as DetectionSettings
from perfci_core.result import HOST_STATE_KEYS, ResultDocument, same_identity

from .. import dispatch
from ..identity import AgentIdentity
from ..bisect import service as bisect_service
from ..configs import repository as config_sql
from ..configs.schemas import ConfigRead
from ..errors import Conflict, NotFound, Unprocessable, summarize, validation_details
from ..jobs import repository as job_sql
from ..jobs import service as job_service
from ..machines import repository as machines_repository
from ..models import JobState, RunStatus, utcnow
from ..repos import repository as repo_sql
from . import repository as result_sql
from .schemas import Comparison, MetricComparison, Series, SeriesPoint, SeriesSample, UploadAccepted

# --- ingest -------------------------------------------------------------------------------------


def parse_result_document(body: bytes) -> ResultDocument:
    """The agent's result document, or a 422 that says what is wrong (nothing is stored).

    Physically impossible values (zero cycles per packet, a negative count, NaN) are not a 422:
    parsing takes them out and notes them (:mod:`perfci_core.result`), the run is stored with the
    rest of its values and those notes (``runs.notes``, the upload's answer). Rejecting the whole
    document would lose every other repetition and metric of the run for one bad derivation, and
    the agent could only send the same document again."""
    try:
        return ResultDocument.model_validate_json(body)
    except ValidationError as exc:
        details = validation_details(exc.errors())
        raise Unprocessable(f"invalid result document: {summarize(details)}", details) from None
    except KeyError as exc:  # the metric catalogue names unknown metrics with a KeyError
        raise Unprocessable(f"invalid result document: {exc.args[0]}") from None


def document_digest(document: ResultDocument) -> str:
    return hashlib.sha256(document.model_dump_json(by_alias=True).encode()).hexdigest()


def ingest(session: Session, agent: AgentIdentity, job_id: int, attempt: int, document: ResultDocument) -> UploadAccepted:
    """Store the result of one attempt; idempotent on (job, attempt), one result set per job.

    Re-sending the stored document returns the stored outcome; a different document for the same
    attempt, or any document for an attempt that is no longer current (lease expired and the job
    requeued, or the job already finished), is a 409.

    Core statements throughout, two round trips on PostgreSQL (lock and read; then the run, the job,
    the samples and the values in one statement): an upload is the hot path and the ORM's unit of
    work would cost more than the SQL.
    """
    digest = document_digest(document)
    job = job_sql.lock_job_for_result(session, job_id, attempt)
    if job is None or job.machine_id != agent.machine_id:
        raise NotFound(f"no job {job_id} for this agent's machine")
    if job.run_id is not None and job.document_sha256 is not None:
        if job.document_sha256 != digest:
            raise Conflict(f"attempt {attempt} of job {job_id} already has a different result")
        return _accepted(job, attempt, job.run_status, job.state, document, duplicate=True)
    job_service.current_attempt(session, agent, job_id, attempt, locked=job)
    assert job.run_id is not None, "every claim creates its run"
    _check_belongs_to_job(session, job, document)

    status = RunStatus(document.status)
    state = job_service.next_job_state(status, job.attempts, job.max_attempts)
    result_sql.store_result(
        session,
        {"job_id": job_id, "run_id": job.run_id, "commit_id": job.commit_id, "machine_id": job.machine_id, "config_id": job.config_id},
        {
            "status": status.value,
            "reason": document.reason,
            "log_tail": document.log_tail,
            "backend": document.backend.value,
            "backend_reason": document.backend_reason,
            "build_id": document.build_id,
            "tuning": document.tuning.model_dump(mode="json"),
            "notes": list(document.notes),
            "unavailable": document.unavailable,
            "noisy": document.noisy.model_dump(mode="json") if document.noisy is not None else None,
            "reused_from": _reused_from(session, job, document),
            "started_at": document.started_at,
            "finished_at": document.finished_at,
            "received_at": utcnow(),
            "document_sha256": digest,
        },
        {"state": state.value, "agent_id": None if state is JobState.QUEUED else job.agent_id},
        [{"rep": s.rep, "raw": s.raw, "running_pct": s.running_pct} for s in document.samples],
        rep_values(document),
    )
    if job.bisect_running:
        bisect_service.job_finished(session, job.machine_id, job.config_id)
    job_service.job_ended(session, job.pull_request_id)
    if status is RunStatus.OK:  # detection sees the new run once this upload commits
        dispatch.send_once_after_commit(session, dispatch.DETECT_TASK, job.machine_id)
    return _accepted(job, attempt, status.value, state.value, document, duplicate=False)


def rep_values(document: ResultDocument) -> list[dict[str, Any]]:
    """One row per metric x backend the document measured: its values in the samples' rep order,
    None for a sample that has no value for it (so each value keeps its sample's position)."""
    samples = sorted(document.samples, key=lambda s: s.rep)
    rows: dict[tuple[str, str], list[float | None]] = {}
    for i, sample in enumerate(samples):
        for m in sample.metrics:
            rows.setdefault((m.metric, m.backend.value), [None] * len(samples))[i] = m.value
    return [{"metric": metric, "backend": backend, "rep_values": values} for (metric, backend), values in rows.items()]


def _check_belongs_to_job(session: Session, job: Row[Any], document: ResultDocument) -> None:
    """``job``: the row of :func:`jobs.repository.lock_job_for_result` (commit, machine, config)."""
    config = ConfigRead.model_validate(job._mapping)
    problems = []
    if document.commit != job.commit_sha:
        problems.append(f"commit {document.commit} is not the job's commit {job.commit_sha}")
    if document.config != config.bench_config().as_run_by(document.backend):
        problems.append(f"config {document.config.name!r} does not match the job's config {config.name!r}")
    if document.machine_id != job.fingerprint and not _retuned(session, job.fingerprint, document):
        problems.append("machine_id is not the fingerprint this agent enrolled with, and the machine differs in more "
                        "than its host state (" + ", ".join(sorted(HOST_STATE_KEYS)) + ")")
    if config.backend != "auto" and document.backend.value != config.backend:
        problems.append(f"config {config.name!r} requires backend {config.backend}, result used {document.backend.value}")
    if problems:
        raise Unprocessable("result does not belong to this job: " + "; ".join(problems), problems)


def _reused_from(session: Session, job: Row[Any], document: ResultDocument) -> dict[str, Any] | None:
    """The document's ``reused_from`` with the run its samples were uploaded as (``run_id``; None
    when that measurement never reached this server, e.g. it was made for another repository)."""
    origin = document.reused_from
    if origin is None:
        return None
    run_id = result_sql.measured_run(session, job.commit_id, origin.commit, job.machine_id, job.config_id, origin.started_at)
    return {**origin.model_dump(mode="json"), "run_id": run_id}


def _retuned(session: Session, fingerprint: str, document: ResultDocument) -> bool:
    """The enrolled machine, with only its host state changed since (hugepages reserved while the
    agent ran): a measurement already made there is kept, never refused. (An unchanged description
    under another machine_id is no retune: that document contradicts itself.)"""
    enrolled = machines_repository.by_fingerprint(session, fingerprint)
    return enrolled is not None and enrolled.details != document.machine and same_identity(enrolled.details, document.machine)


def _accepted(job: Row[Any], attempt: int, run_status: str, job_state: str, document: ResultDocument, duplicate: bool) -> UploadAccepted:
    return UploadAccepted(
        job_id=job.job_id,
        attempt=attempt,
        run_id=job.run_id,
        run_status=run_status,
        job_state=job_state,
        samples=len(document.samples),
        metric_values=sum(len(s.metrics) for s in document.samples),
        duplicate=duplicate,
        notes=list(document.notes),
    )


# --- reads -------------------------------------------------------------------------------------


def series(
    session: Session,
    repository_id: int,
    branch: str,
    machine_id: int,
    config: str,
    metric: str,
    backend: catalogue.Backend,
    after_position: int | None,
    limit: int,
) -> Series:
    """Every sample of one metric along a branch, in commit order (one page of commits)."""
    definition = _metric(metric)
    branch_row = repo_sql.branch(session, repository_id, branch)
    if branch_row is None:
        raise NotFound(f"no branch {branch!r} in repository {repository_id}")
    config_row = config_sql.by_name(session, config)
    if config_row is None:
        raise NotFound(f"no benchmark config {config!r}")
    key = (branch_row.id, machine_id, config_row.id, metric, backend.value)
    positions = result_sql.series_positions(session, *key, after_position, limit)
    points: list[SeriesPoint] = []
    if positions:
        for row in result_sql.series_values(session, *key, positions[0], positions[-1]):
            if not points or points[-1].position != row.position:
                points.append(SeriesPoint(position=row.position, commit=row.sha, committed_at=row.committed_at, run_id=row.run_id, samples=[]))
            points[-1].samples.append(SeriesSample(rep=row.rep, value=row.value))
    return Series(
        repository_id=repository_id,
        branch=branch,
        machine_id=machine_id,
        config=config,
        metric=metric,
        backend=backend.value,
        unit=definition.unit,
        direction=definition.direction.value,
        points=points,
        next_after_position=positions[-1] if len(positions) == limit else None,
    )


def compare(session: Session, repository_id: int, base: str, head: str, machine_id: int, config: str) -> Comparison:
    """Per (metric, backend) measured on both commits: medians, % change and p-value."""
    config_row = config_sql.by_name(session, config)
    if config_row is None:
        raise NotFound(f"no benchmark config {config!r}")
    values, noisy = [], []
    for sha in (base, head):
        commit = repo_sql.commit_by_sha(session, repository_id, sha)
        if commit is None:
            raise NotFound(f"no commit {sha} in repository {repository_id}")
        noisy.append(result_sql.run_is_noisy(session, commit.id, machine_id, config_row.id))
        grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
        for metric, backend, value in result_sql.values_of_commit(session, commit.id, machine_id, config_row.id):
            grouped[(metric, backend)].append(value)
        values.append(grouped)
    base_values, head_values = values
    results = []
    for metric, backend in sorted(base_values.keys() & head_values.keys()):
        definition = _metric(metric)
        stat = two_sample_verdict(base_values[(metric, backend)], head_values[(metric, backend)], definition,
                                  backend=backend, min_effect=DETECTION.min_change)
        results.append(
            MetricComparison(
                metric=metric,
                backend=backend,
                unit=definition.unit,
                direction=definition.direction.value,
                n_base=len(base_values[(metric, backend)]),
                n_head=len(head_values[(metric, backend)]),
                base_median=stat.before_median,
                head_median=stat.after_median,
                change_pct=stat.rel_change * 100.0 if math.isfinite(stat.rel_change) else None,
                p_value=stat.p_value,
                verdict=stat.verdict.value,
                worse=definition.is_regression(stat.before_median, stat.after_median),
            )
        )
    return Comparison(repository_id=repository_id, machine_id=machine_id, config=config, base=base, head=head, metrics=results,
                      noisy_base=noisy[0], noisy_head=noisy[1])


# Two commits are SAME when they differ by less than detection's minimum effect.
DETECTION = DetectionSettings()


def _metric(name: str) -> catalogue.Metric:
    try:
        return catalogue.get(name)
    except KeyError as exc:
        raise NotFound(str(exc.args[0])) from None
