"""One log line per Celery task run: name, task id, arguments (ids), outcome (the return value, the
retry's reason, or the exception with its traceback) and duration. From a real worker process (as
JSON, Celery's own per-task lines turned down) and from the embedded in-process (eager) mode."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from perfci_server import dispatch
from perfci_server.celery_app import RESEND_STATUSES_TASK, celery_app
from perfci_server.repos.service import COMPLETE_PUSH_TASK
from server_support import create_config, create_repository, enroll, push_github
from test_celery_worker import worker  # noqa: F401 - a real Celery worker process (fixture)

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
def json_worker(leaves_no_task_behind: None, json_logs: None, worker: Any) -> Any:  # noqa: F811 - started after json_logs
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
