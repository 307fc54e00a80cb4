"""One log line per Celery task run: name, task id, arguments (ids), outcome (the return value, the
retry's reason, or the exception with its traceback) and duration. From a real worker process (as
JSON, Celery's own per-task lines turned down) and from the embedded in-process (eager) mode; and
`perfci worker` and `perfci beat` in production write nothing but JSON lines."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from perfci_server import dispatch, logs
from perfci_server.celery_app import RESEND_STATUSES_TASK, celery_app
from perfci_server.repos.service import COMPLETE_PUSH_TASK
from tests.server.server_support import create_config, create_repository, enroll, push_github
from tests.support.services import TEST_DATABASE_URL


pytestmark = pytest.mark.services


@celery_app.task(name="perfci.tests.divide")
def divide(a: int, b: int) -> float:
    return a / b


@celery_app.task(name="perfci.tests.flaky", bind=True, max_retries=1)
def flaky(self: Any, n: int) -> int:
    if self.request.retries == 0:
        raise self.retry(countdown=0, exc=RuntimeError("not yet"))
    return n


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFCI_LOG_FORMAT", "json")


@pytest.fixture
def leaves_no_task_behind(redis_url: str) -> Iterator[None]:
    """Once the worker has stopped: the retry it was holding goes back to the queue; drop it."""
    yield
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete("perfci", "unacked", "unacked_index")
    client.close()


@pytest.fixture
def json_worker(leaves_no_task_behind: None, json_logs: None, worker: Any) -> Any:  # started after json_logs
    return worker


def _task_lines(log: Any) -> list[dict[str, Any]]:
    log.seek(0)
    lines = [json.loads(raw) for raw in log.read().splitlines() if raw.startswith("{")]
    return [line for line in lines if line["message"] == "task"]


def test_a_worker_writes_one_line_per_task_run(committed_client, sent_tasks, json_worker, redis_url):
    process, log = json_worker
    create_repository(committed_client)
    create_config(committed_client)
    enroll(committed_client)
    push_github(committed_client)
    [(push_id,)] = sent_tasks.named(COMPLETE_PUSH_TASK)

    producer = Celery("perfci-test", broker=redis_url)
    sent = [producer.send_task(RESEND_STATUSES_TASK, queue="perfci").id,  # succeeds: nothing pending to re-send
            producer.send_task(COMPLETE_PUSH_TASK, args=(push_id,), queue="perfci").id,  # the mirror cannot be fetched here: retried
            producer.send_task(COMPLETE_PUSH_TASK, args=(), queue="perfci").id]  # a message the task cannot take: fails
    producer.close()

    def first_runs() -> dict[str, dict[str, Any]]:  # by task id: the queue may hold an earlier run's retry
        runs: dict[str, dict[str, Any]] = {}
        for line in _task_lines(log):
            runs.setdefault(line["task_id"], line)
        return {task_id: runs[task_id] for task_id in sent if task_id in runs}

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and len(first_runs()) < 3:
        time.sleep(0.2)
    log.seek(0)
    everything = log.read()
    assert len(first_runs()) == 3, f"the worker wrote {len(first_runs())} of the 3 task lines; its log:\n{everything[-4000:]}"
    resend, retried, failed = (first_runs()[task_id] for task_id in sent)
    assert (resend["name"], resend["args"], resend["outcome"], resend["result"], resend["level"]) == (
        RESEND_STATUSES_TASK, [], "success", 0, "info")
    assert (retried["name"], retried["args"], retried["outcome"], retried["level"], retried["retries"]) == (
        COMPLETE_PUSH_TASK, [push_id], "retry", "warning", 0)
    assert "the mirror could not be fetched" in retried["error"]
    assert (failed["name"], failed["args"], failed["outcome"], failed["level"]) == (COMPLETE_PUSH_TASK, [], "failure", "error")
    assert failed["error"].startswith("TypeError: ") and "Traceback" in failed["exception"]
    for line in (resend, retried, failed):
        assert line["duration_ms"] >= 0 and line["task_id"] and line["logger"] == "perfci.task"
    assert " succeeded in " not in everything and "] received" not in everything  # Celery's own lines say it once more


def test_the_embedded_mode_writes_the_same_line(caplog, pg_settings):
    caplog.set_level(logging.INFO, logger="perfci.task")
    assert celery_app.conf.task_always_eager  # no broker: tasks run in the sending process
    dispatch.send_now("perfci.tests.divide", 6, 3)  # the embedded server's path: dispatch -> apply_async, run in-process
    dispatch.send_now("perfci.tests.divide", 1, 0)
    records = [r for r in caplog.records if r.name == "perfci.task"]
    lines = [r.perfci_fields for r in records]
    assert [(line["name"], line["args"], line["outcome"]) for line in lines] == [
        ("perfci.tests.divide", [6, 3], "success"), ("perfci.tests.divide", [1, 0], "failure")]
    assert lines[0]["result"] == 2.0
    assert lines[1]["error"] == "ZeroDivisionError: division by zero"
    assert records[1].levelno == logging.ERROR and records[1].exc_info[0] is ZeroDivisionError
    assert all(line["duration_ms"] >= 0 and line["task_id"] for line in lines)


def test_an_eager_retry_is_a_line_of_its_own(caplog, pg_settings):
    caplog.set_level(logging.INFO, logger="perfci.task")
    flaky.apply_async(args=(7,))
    lines = [r.perfci_fields for r in caplog.records if r.name == "perfci.task"]
    assert [(line["outcome"], line["retries"]) for line in lines] == [("retry", 0), ("success", 1)]
    assert "not yet" in lines[0]["error"] and lines[1]["result"] == 7
    assert lines[0]["task_id"] == lines[1]["task_id"]  # one task, run twice


def test_a_run_cut_short_is_interrupted_with_the_exception_that_stopped_it(caplog):
    """Celery sends task_postrun with no state when the run ends by a BaseException (the pool process
    told to stop): the line says so, with that exception (as Celery sends it, from its `finally`)."""
    caplog.set_level(logging.INFO, logger="perfci.task")
    logs._task_started(task_id="t-cut")
    try:
        raise SystemExit("the worker is stopping")
    except SystemExit:
        logs._task_ended(task_id="t-cut", task=divide, args=(1, 2), retval=None, state=None)
    [record] = [r for r in caplog.records if r.name == "perfci.task"]
    assert (record.perfci_fields["outcome"], record.perfci_fields["error"]) == ("interrupted", "SystemExit: the worker is stopping")
    assert record.levelno == logging.ERROR


def _perfci(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "w") as log:
        return subprocess.Popen([str(Path(sys.executable).parent / "perfci"), *command], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown lets a running task end
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_perfci_worker_and_beat_in_production_write_json_lines(committed, leaves_no_task_behind, redis_url, tmp_path):
    env = {**os.environ, "PERFCI_ENV": "production", "PERFCI_DATABASE_URL": TEST_DATABASE_URL, "PERFCI_BROKER_URL": redis_url,
           "PERFCI_ADMIN_TOKEN": "observe-admin-token-0123456789", "PERFCI_DATA_DIR": str(tmp_path / "data"),
           "PERFCI_REQUEUE_INTERVAL_SECONDS": "2"}  # beat's first due task in seconds, not the default 30
    for name in ("PERFCI_LOG_FORMAT", "PERFCI_LOG_LEVEL"):
        env.pop(name, None)  # production's default: JSON
    worker_log, beat_log = tmp_path / "worker.log", tmp_path / "beat.log"
    worker = _perfci(["worker", "--concurrency", "1"], env, worker_log)
    beat = _perfci(["beat"], env, beat_log)
    try:
        producer = Celery("perfci-test", broker=redis_url)
        task_id = producer.send_task(RESEND_STATUSES_TASK, queue="perfci").id
        producer.close()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and f'"task_id": "{task_id}"' not in worker_log.read_text():
            time.sleep(0.3)
        while time.monotonic() < deadline and "Scheduler: Sending due task" not in beat_log.read_text():
            time.sleep(0.3)
    finally:
        _stop(worker)
        _stop(beat)
    for path in (worker_log, beat_log):
        text = path.read_text()
        # Celery prints its own "worker: Warm shutdown" as it stops: the one line that is not ours
        lines = [raw for raw in text.splitlines() if raw.strip() and not raw.startswith("worker: Warm shutdown")]
        assert lines and all(raw.startswith("{") for raw in lines), f"{path.name} is not JSON lines:\n{text[-3000:]}"
        parsed = [json.loads(raw) for raw in lines]
        assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in parsed)
    [run] = [line for line in (json.loads(r) for r in worker_log.read_text().splitlines() if r.startswith("{"))
             if line.get("task_id") == task_id]
    assert (run["name"], run["outcome"], run["result"]) == (RESEND_STATUSES_TASK, "success", 0)
    assert any("Sending due task" in json.loads(raw)["message"] for raw in beat_log.read_text().splitlines() if raw.startswith("{"))


def test_an_unknown_log_level_is_refused_before_celery_starts(monkeypatch, redis_url):
    from typer.testing import CliRunner

    from perfci_cli.app import app
    from perfci_server.settings import get_settings

    monkeypatch.setenv("PERFCI_BROKER_URL", redis_url)
    get_settings.cache_clear()
    for command in ("worker", "beat"):
        result = CliRunner().invoke(app, [command, "--loglevel", "chatty"])
        assert result.exit_code == 2, result.output
        assert "'chatty' is not one of debug, info, warning, error, critical" in result.output
