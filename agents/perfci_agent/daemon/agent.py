"""The agent daemon: claim a job, measure it, get the result to the server, repeat.

    start: identity (enroll once) -> backends -> upload what the spool holds
    loop:  heartbeat (when due) -> claim (the server holds it up to poll_seconds until a job is
           queued) -> [tuned-state gate] -> fetch into the bare mirror
           -> perfci measure (same code path; once more when the result is marked noisy)
           -> spool -> upload until acknowledged

A paired claim (the commits either side of a suspected change, one job each) is measured
interleaved in one session (:mod:`.paired`); each of its two jobs is renewed, failed, released
and uploaded on its own.

The lease is renewed from a background thread from claim until the upload is acknowledged.
Failures that are not the commit's (fetch failed, unusable backend, an agent bug) go to the
failure endpoint; build and run failures are results and are uploaded like any other. A stop
request (SIGTERM) lets the running repetition finish, then gives the job back (release) and
returns; a document already spooled stays there for the next start.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from perfci_core.result import MAX_TEXT, ResultDocument, Tuning

from ..errors import MeasureError
from ..interleave import Interleaved, interleave
from ..measure import Stopped, measure
from ..noisy import describe
from ..server_api import AgentClient, ApiError, ServerUnreachable, is_transient
from ..workspace import tail
from . import host, identity
from .backoff import Backoff
from .claim import Claim
from .config import AgentConfig
from .lease import LeaseRenewer
from .mirror import FetchFailed, MirrorCache
from .paired import PairLog, Side, not_measured
from .spool import Spool, Spooled

log = logging.getLogger("perfci_agent.daemon")
T = TypeVar("T")
# A noisy measurement is taken again once: a burst of other work usually passes within a job's
# time, and a host that stays loaded should not hold the job (and the queue) for long.
NOISY_REMEASURES = 1
CLAIM_WAIT_MAX_S = 60.0  # the server holds an idle claim this long at most (its ?wait= bound)


def version() -> str:
    try:
        return metadata.version("perfci")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class Fatal(Exception):
    """The agent cannot go on (credentials refused, machine changed, nothing to measure with)."""


class Stopping(Exception):
    """A stop was requested while waiting for the server."""


class StepLog:
    """``perfci measure`` progress events as log lines with durations."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = self.mark = time.monotonic()

    def _lap(self) -> float:
        now = time.monotonic()
        lap, self.mark = now - self.mark, now
        return lap

    def __call__(self, event: str, **kw: Any) -> None:
        if event == "backend":
            log.info("%s: backend %s (%s)", self.label, kw["backend"], kw["reason"])
        elif event == "build":
            self._lap()
            log.info("%s: build", self.label)
        elif event == "build_step":
            log.info("%s: build: %s", self.label, kw["step"])
        elif event == "built":
            log.info("%s: build %s in %.1f s", self.label, "cached" if kw["cached"] else "done", self._lap())
        elif event == "reused":
            log.info("%s: sim counts reused from commit %s (the same binary, config and tool)", self.label, kw["commit"][:12])
        elif event == "calibrate":
            log.info("%s: calibrate", self.label)
        elif event == "run":
            lap = self._lap()
            after = f" (repetition {kw['rep']} took {lap:.1f} s)" if kw["rep"] else ""
            log.info("%s: repetition %d/%d%s", self.label, kw["rep"] + 1, kw["reps"], after)
        elif event == "done":
            log.info("%s: %d repetition(s) done (the last took %.1f s)", self.label, kw["reps"], self._lap())


def _auth_refused(exc: Exception) -> bool:
    return isinstance(exc, ApiError) and exc.status in (401, 403)


class Agent:
    def __init__(self, config: AgentConfig, stop: threading.Event | None = None,
                 backoff: Callable[[], Backoff] = Backoff) -> None:
        self.config = config
        self.stop = stop or threading.Event()
        self.backoff = backoff
        self.spool = Spool(config.spool_dir)
        self.mirrors = MirrorCache(config.cache_dir / "mirrors")
        self.token: str | None = None
        self.machine: identity.Machine | None = None
        self.backends: list[str] = []
        self.identity_problem: str | None = None  # why this host stopped claiming (identity_holds)
        self._next_heartbeat = -math.inf

    def client(self) -> AgentClient:
        return AgentClient(self.config.server_url, self.token)

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Until stopped: 0. :class:`Fatal` propagates (the caller exits 1)."""
        try:
            self.start()
            self.drain_spool()
            while not self.stop.is_set():
                try:
                    self.step()
                except ApiError as exc:  # a request the server refuses (not a transient failure)
                    log.error("the server refused a request: %s; trying again in %.0f s", exc, self.config.poll_seconds)
                    self.stop.wait(self.config.poll_seconds)
        except Stopping:
            pass
        log.info("agent stopped")
        return 0

    def start(self) -> None:
        cfg = self.config
        for directory in (cfg.state_dir, cfg.cache_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.spool.ensure()
        if cfg.core not in os.sched_getaffinity(0):
            raise Fatal(f"core {cfg.core} (first of cores) is not available to this process; allowed: {sorted(os.sched_getaffinity(0))}")
        self.machine = identity.this_machine(cfg.core)
        self.backends, problems = host.usable_backends(cfg.backends, host.probe_backends(self.machine, cfg.cache_dir, cfg.core))
        for problem in problems:
            log.warning("%s", problem)
        if not self.backends:
            raise Fatal("none of the configured backends can run here: " + "; ".join(problems))
        machine = self.machine
        try:
            self.token = identity.read_token(cfg.token_path)
            if self.token:
                identity.check_enrollment_record(cfg, machine)
            else:
                self.token = self._call("enroll", lambda c: identity.enroll(cfg, c, machine, self.backends, version()))
                log.info("enrolled as %r; token stored in %s", cfg.machine_name, cfg.token_path)
        except identity.IdentityError as exc:
            raise Fatal(str(exc)) from None
        log.info("agent %r (perfci %s) on core %d, backends %s, server %s, state %s",
                 cfg.machine_name, version(), cfg.core, ",".join(self.backends), cfg.server_url, cfg.state_dir)

    def drain_spool(self) -> None:
        pending = self.spool.pending()
        if pending:
            log.info("spool: %d result(s) from before this start to upload", len(pending))
        for item in pending:
            self.deliver(item)

    def step(self) -> None:
        """One turn of the loop: heartbeat when due, claim, work or wait."""
        if time.monotonic() >= self._next_heartbeat:
            self._call("heartbeat", lambda c: c.heartbeat(backends=self.backends, version=version(),
                                                          stopped_claiming=self.identity_problem))
            self._next_heartbeat = time.monotonic() + self.config.heartbeat_seconds
        if not self.identity_holds():
            self.stop.wait(self.config.poll_seconds)
            return
        asked = time.monotonic()
        claimed = self._call("claim", lambda c: c.claim(wait=min(self.config.poll_seconds, CLAIM_WAIT_MAX_S)))
        if claimed is None:  # the server held the claim while it waited; an older one answers at once
            self.stop.wait(max(0.0, self.config.poll_seconds - (time.monotonic() - asked)))
            return
        self.work(Claim.model_validate(claimed))

    def identity_holds(self) -> bool:
        """Whether this host is still the machine it enrolled as; checked before every claim, so a
        host whose CPU or kernel changed under the agent stops claiming (and says why, once)
        instead of measuring jobs for a machine it no longer is."""
        try:
            problem = identity.identity_change(self.config, identity.this_machine(self.config.core))
        except identity.IdentityError as exc:
            problem = str(exc)
        if problem != self.identity_problem:
            if problem is not None:
                log.error("not claiming jobs: %s", problem)
            else:
                log.info("this host is the machine it enrolled as again: claiming jobs")
            self.identity_problem = problem
            self._next_heartbeat = -math.inf  # the server (agents API) hears it at once
        return problem is None

    # --- one job -----------------------------------------------------------------------------

    def work(self, job: Claim) -> None:
        if job.partner is not None:
            self.work_pair(job)
            return
        started = time.monotonic()
        log.info("%s: claimed (lease %d s, backend %s, %d repetition(s))", job.label, job.lease_seconds, job.backend, job.repetitions)
        with LeaseRenewer(self.client, job.job_id, job.attempt, job.lease_seconds) as lease:
            document = self.attempt(job, lease)
            item = self._spool(job, document) if document is not None else None
            if item is not None:
                self.deliver(item)
        log.info("%s: finished in %.1f s (%d lease renewal(s))", job.label, time.monotonic() - started, lease.renewals)

    def attempt(self, job: Claim, lease: LeaseRenewer) -> bytes | None:
        """The result document to upload, or None when the job was failed, released or lost."""
        cfg = self.config
        assert self.machine is not None
        tuned = host.tuned_state(cfg.core, self.machine, cfg.backends)
        if not tuned.ok:
            log.warning("%s: host not in its tuned state: %s", job.label, "; ".join(tuned.deviations))
            if cfg.refuse_untuned:
                self.fail(job.job_id, job.attempt, "host is not in its tuned state (refuse_untuned): " + "; ".join(tuned.deviations))
                return None
        fetch_started = time.monotonic()
        try:
            mirror, action = self.mirrors.fetch(job.clone_url, job.commit)
        except FetchFailed as exc:
            self.fail(job.job_id, job.attempt, str(exc), exc.log_tail)
            return None
        log.info("%s: fetch %s in %.1f s (%s)", job.label, action, time.monotonic() - fetch_started, mirror)
        if self.stop.is_set():
            self.release(job, "agent stopping before the measurement started")
            return None
        measured = time.monotonic()
        try:
            doc = self._measure_trusted(job, mirror, lease)
        except Stopped as exc:
            if lease.lost is None:
                self.release(job, f"agent stopping ({exc})")
            return None
        except MeasureError as exc:  # bad input or backend; build and run failures are results
            self.fail(job.job_id, job.attempt, f"cannot measure: {exc}")
            return None
        except Exception as exc:  # an agent bug must not kill the daemon
            log.exception("%s: agent error", job.label)
            self.fail(job.job_id, job.attempt, f"agent error: {type(exc).__name__}: {exc}", tail(traceback.format_exc()))
            return None
        if lease.lost is not None:
            log.warning("%s: result discarded, the attempt is no longer ours: %s", job.label, lease.lost)
            return None
        if self.stop.is_set() and doc.status == "run_failed":
            # The stop signal can reach the dataplane too (a whole control group is signalled).
            self.release(job, f"agent stopping; the last repetition was interrupted ({doc.reason})")
            return None
        doc = doc.model_copy(update={"tuning": host.merge(doc.tuning, tuned)})
        log.info("%s: measured: %s in %.1f s (%d sample(s), backend %s)%s", job.label, doc.status,
                 time.monotonic() - measured, len(doc.samples), doc.backend.value, f": {doc.reason}" if doc.reason else "")
        return doc.model_dump_json(by_alias=True).encode()

    def _spool(self, job: Claim, document: bytes) -> Spooled | None:
        try:
            item = self.spool.put(job.job_id, job.attempt, document)
        except OSError as exc:  # disk full, permissions: the result cannot be kept safely
            self.fail(job.job_id, job.attempt, f"cannot spool the result in {self.spool.directory}: {exc}")
            return None
        log.info("%s: result spooled (%s)", job.label, item.path)
        return item

    def _measure_trusted(self, job: Claim, mirror: Any, lease: LeaseRenewer) -> ResultDocument:
        """``perfci measure`` for the job; a result marked noisy (its repetitions spread far beyond
        this machine's usual noise) is measured again, at most :data:`NOISY_REMEASURES` times,
        and uploaded marked noisy only when it is still noisy then."""
        cfg = self.config
        doc = None
        for attempt in range(NOISY_REMEASURES + 1):
            doc = measure(repo=mirror, commit=job.commit, backend=host.backend_for_job(job.backend, cfg.backends, self.backends),
                          reps=cfg.repetitions or job.repetitions, config=job.config, core=cfg.core, cache_dir=cfg.cache_dir,
                          progress=StepLog(job.label), should_stop=lambda: self.stop.is_set() or lease.lost is not None,
                          sim_family=cfg.sim_family or None, cores=cfg.cores)
            if doc.noisy is None:
                return doc
            log.warning("%s: %s", job.label, describe(doc.noisy))
            if attempt < NOISY_REMEASURES:
                log.info("%s: measuring again (%d of at most %d)", job.label, attempt + 1, NOISY_REMEASURES)
        assert doc is not None and doc.noisy is not None
        return doc.model_copy(update={"noisy": doc.noisy.model_copy(update={"remeasured": NOISY_REMEASURES})})

    # --- a pair of jobs ----------------------------------------------------------------------

    def work_pair(self, job: Claim) -> None:
        """The claimed job and its partner, measured A B A B ... in one session (base: the claimed
        job's commit, head: the partner's). Both documents are spooled before either is uploaded."""
        started = time.monotonic()
        partner = job.partner_job()
        log.info("%s: claimed with %s (lease %d s, backend %s, %d pair(s), pair seed %s)", job.label, partner.label,
                 job.lease_seconds, job.backend, job.repetitions, job.pair_seed)
        with LeaseRenewer(self.client, job.job_id, job.attempt, job.lease_seconds) as lease, \
                LeaseRenewer(self.client, partner.job_id, partner.attempt, partner.lease_seconds) as partner_lease:
            sides = [Side("base", job, lease), Side("head", partner, partner_lease)]
            spooled = [self._spool(side.job, document) for side, document in self.attempt_pair(sides)]
            for item in spooled:
                if item is not None:
                    self.deliver(item)
        for side in sides:
            log.info("%s: finished in %.1f s (%d lease renewal(s))", side.job.label, time.monotonic() - started,
                     side.lease.renewals)

    def attempt_pair(self, sides: list[Side]) -> list[tuple[Side, bytes]]:
        """The documents to upload, each with its side: none when the pair was failed or released,
        one when a side was lost or left unmeasured because of the other."""
        cfg = self.config
        assert self.machine is not None
        tuned = host.tuned_state(cfg.core, self.machine, cfg.backends)
        if not tuned.ok:
            log.warning("%s: host not in its tuned state: %s", self._pair_label(sides), "; ".join(tuned.deviations))
            if cfg.refuse_untuned:
                self._fail_pair(sides, "host is not in its tuned state (refuse_untuned): " + "; ".join(tuned.deviations))
                return []
        mirror = self._fetch_pair(sides)
        if mirror is None:
            return []
        if self.stop.is_set():
            self._release_pair(sides, "agent stopping before the measurement started")
            return []
        measured = time.monotonic()
        try:
            pair = self._interleave(sides, mirror)
        except Stopped as exc:
            # not stopping: a lease was lost, so only the partner is still ours to give back
            why = f"agent stopping ({exc})" if self.stop.is_set() else f"the partner's lease was lost ({exc})"
            self._release_pair(sides, why)
            return []
        except MeasureError as exc:  # bad input or backend; build and run failures are results
            self._fail_pair(sides, f"cannot measure: {exc}")
            return []
        except Exception as exc:  # an agent bug must not kill the daemon
            log.exception("%s: agent error", self._pair_label(sides))
            self._fail_pair(sides, f"agent error: {type(exc).__name__}: {exc}", tail(traceback.format_exc()))
            return []
        docs = {"base": pair.base, "head": pair.head}
        interrupted = [doc.reason or "" for doc in docs.values() if doc.status == "run_failed" and not not_measured(doc)]
        if self.stop.is_set() and interrupted:
            # The stop signal can reach the dataplane too; the other side's pairs alone are no paired result.
            self._release_pair(sides, f"agent stopping; the pair's last run was interrupted ({'; '.join(interrupted)})")
            return []
        log.info("%s: pair order seed %d, %d complete pair(s) in %.1f s", self._pair_label(sides), pair.seed, pair.pairs,
                 time.monotonic() - measured)
        # No noisy re-measure for a pair: the paired verdict already leaves burst pairs out
        # (perfci_core.analysis.paired.burst_pairs), so interleave's noisy marks are uploaded as they are.
        return [(side, document) for side in sides if (document := self._settle(side, docs[side.name], tuned)) is not None]

    def _settle(self, side: Side, doc: ResultDocument, tuned: Tuning) -> bytes | None:
        """One side's document to upload, or None when its lease is lost or it was left unmeasured."""
        job = side.job
        if not side.held:
            log.warning("%s: result discarded, the attempt is no longer ours: %s", job.label, side.lease.lost)
            return None
        log.info("%s: measured: %s (%d sample(s), backend %s)%s", job.label, doc.status, len(doc.samples), doc.backend.value,
                 f": {doc.reason}" if doc.reason else "")
        if not_measured(doc):
            # Not this commit's failure: queued again now and measured alone later, without using up an attempt.
            self.release(job, doc.reason or "not measured")
            return None
        doc = doc.model_copy(update={"tuning": host.merge(doc.tuning, tuned)})
        return doc.model_dump_json(by_alias=True).encode()

    def _fetch_pair(self, sides: list[Side]) -> Path | None:
        """The mirror holding both commits, or None when either could not be fetched (both failed)."""
        mirror = None
        for side in sides:
            job, fetch_started = side.job, time.monotonic()
            try:
                mirror, action = self.mirrors.fetch(job.clone_url, job.commit)
            except FetchFailed as exc:
                for other in sides:
                    why = str(exc) if other is side else f"the partner job {job.job_id}'s commit could not be fetched: {exc}"
                    self.fail(other.job.job_id, other.job.attempt, why, exc.log_tail)
                return None
            log.info("%s: fetch %s in %.1f s (%s)", job.label, action, time.monotonic() - fetch_started, mirror)
        return mirror

    def _interleave(self, sides: list[Side], mirror: Path) -> Interleaved:
        """``interleave`` with exactly what ``_measure_trusted`` gives ``measure`` for one job."""
        cfg = self.config
        base, head = (side.job for side in sides)
        return interleave(mirror, base=base.commit, head=head.commit, pairs=cfg.repetitions or base.repetitions,
                          seed=base.pair_seed, backend=host.backend_for_job(base.backend, cfg.backends, self.backends),
                          config=base.config, core=cfg.core, cache_dir=cfg.cache_dir, progress=PairLog(sides),
                          should_stop=lambda: self.stop.is_set() or not all(side.held for side in sides),
                          sim_family=cfg.sim_family or None, cores=cfg.cores)

    def _fail_pair(self, sides: list[Side], reason: str, log_tail: str | None = None) -> None:
        for side in sides:
            self.fail(side.job.job_id, side.job.attempt, reason, log_tail)

    def _release_pair(self, sides: list[Side], reason: str) -> None:
        for side in sides:
            if side.held:
                self.release(side.job, reason)
            else:
                log.warning("%s: not released, the attempt is no longer ours: %s", side.job.label, side.lease.lost)

    @staticmethod
    def _pair_label(sides: list[Side]) -> str:
        return " + ".join(side.job.label for side in sides)

    # --- talking to the server ---------------------------------------------------------------

    def deliver(self, item: Spooled) -> bool:
        """Upload a spooled document until the server acknowledges or refuses it for good."""
        what = f"job {item.job_id} attempt {item.attempt}"
        body = item.body
        for delay in self.backoff().delays():
            try:
                with self.client() as client:
                    response = client.upload_result(item.job_id, item.attempt, body)
            except (ApiError, ServerUnreachable) as exc:
                if _auth_refused(exc):
                    raise Fatal(f"the server refused this agent's token ({exc}); {what} stays in {item.path}") from None
                if is_transient(exc):
                    log.warning("%s: upload failed (%s); kept in the spool, retrying in %.1f s", what, exc, delay)
                    if self.stop.wait(delay):
                        log.info("%s: stopping with the result still spooled; it is uploaded at the next start", what)
                        raise Stopping from None
                    continue
                assert isinstance(exc, ApiError)
                kept = self.spool.reject(item, f"{exc.status} {exc.code}: {exc.message}")
                log.error("%s: the server refused the result for good (%s); kept in %s", what, exc, kept)
                if exc.status in (413, 422):  # the attempt would otherwise wait for its lease to expire
                    self.fail(item.job_id, item.attempt, f"result refused by the server: {exc.message}")
                return False
            self.spool.done(item)
            ack = response.json()
            log.info("%s: uploaded (%s): run %s is %s, job is %s, %d sample(s)", what,
                     "already stored" if ack.get("duplicate") else "stored", ack.get("run_id"), ack.get("run_status"),
                     ack.get("job_state"), ack.get("samples", 0))
            return True
        raise AssertionError("unreachable: backoff delays never end")

    def fail(self, job_id: int, attempt: int, reason: str, log_tail: str | None = None) -> None:
        log.error("job %d attempt %d: failed: %s", job_id, attempt, reason)
        try:
            self._call("failure report", lambda c: c.report_failure(job_id, attempt, reason[:MAX_TEXT], (log_tail or None) and log_tail[-MAX_TEXT:]))
        except ApiError as exc:
            log.warning("job %d attempt %d: failure report refused (%s)", job_id, attempt, exc)

    def release(self, job: Claim, reason: str) -> None:
        """Give the attempt back so the job is queued again now, not when the lease expires.
        ``job``: a claim, or its partner as a job of its own (:meth:`Claim.partner_job`)."""
        try:
            with self.client() as client:
                outcome = client.release(job.job_id, job.attempt, reason[:2000])
            log.info("%s: released (%s); job is %s", job.label, reason, outcome.get("job_state"))
        except (ApiError, ServerUnreachable) as exc:
            log.warning("%s: could not release (%s); the job is requeued when its lease expires", job.label, exc)

    def _call(self, what: str, fn: Callable[[AgentClient], T]) -> T:
        """``fn(client)``, retried with backoff while the server is unreachable or failing."""
        for delay in self.backoff().delays():
            try:
                with self.client() as client:
                    return fn(client)
            except (ApiError, ServerUnreachable) as exc:
                if _auth_refused(exc):
                    raise Fatal(f"{what}: the server refused our credentials: {exc}") from None
                if not is_transient(exc):
                    raise
                log.warning("%s: %s; retrying in %.1f s", what, exc, delay)
                if self.stop.wait(delay):
                    raise Stopping from None
        raise AssertionError("unreachable: backoff delays never end")
