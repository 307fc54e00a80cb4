"""Schemathesis on every operation of the OpenAPI schema, as an admin, as an agent and with no token:
whatever it generates (in and out of the schema), no answer is a server error. A fixed seed and a
few examples per operation keep it short enough for CI; the schema-driven walks of
test_hostile_input.py pin the bounds themselves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings, strategies
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from sqlalchemy.orm import Session

from perfci_server.app import create_app
from perfci_server.deps import get_session
from tests.server.server_support import ADMIN, create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services

EXAMPLES_PER_OPERATION = 10


@pytest.fixture
def callers(over_the_test_transaction: None, client: Any, session: Session) -> dict[str, dict[str, str]]:
    """Something for the generated ids to find (repository, config, agent, a pushed branch with
    jobs), and the three kinds of caller."""
    create_repository(client)
    create_config(client)
    agent = enroll(client)
    push_github(client)
    session.commit()
    return {"admin": ADMIN, "agent": agent["headers"], "anonymous": {}}


APP = create_app()
SCHEMA = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP)


@pytest.fixture
def over_the_test_transaction(session: Session, sent_tasks: Any, pg_settings: None) -> Iterator[None]:
    """APP's requests in the test's transaction, as with the `client` fixture (rolled back after)."""

    def _session() -> Iterator[Session]:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise

    APP.dependency_overrides[get_session] = _session
    yield
    APP.dependency_overrides.clear()


FUZZ = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,  # a fixed seed: the same cases on every run
    phases=[Phase.generate],  # no shrinking (the first failing case is reported as is), no coverage phase
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _fuzz(operation: Any, callers: dict[str, dict[str, str]]) -> None:
    """Cases in and out of the operation's schema, each sent by every caller."""
    cases = strategies.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))

    @FUZZ
    @given(case=cases)
    def no_server_error(case: Any) -> None:
        _short_claim_waits(case)
        for headers in callers.values():
            response = case.call(headers=headers)
            case.validate_response(response, checks=[not_a_server_error], headers=headers)

    no_server_error()


def _short_claim_waits(case: Any) -> None:
    """A claim is held as long as its valid ``wait`` asks (60 s at most): the fuzz keeps those short."""
    wait = (case.query or {}).get("wait")
    try:
        valid = 0.2 < float(wait) <= 60
    except (TypeError, ValueError):
        return
    if valid:
        case.query["wait"] = 0.2


def test_no_operation_answers_a_server_error(callers: dict[str, dict[str, str]]) -> None:
    operations = [result.ok() for result in SCHEMA.get_all_operations()]
    failures = {}
    for operation in operations:
        try:
            _fuzz(operation, callers)
        except Exception as exc:  # noqa: BLE001 - every operation is tried, every failure reported
            failures[operation.label] = str(exc)[:3000]
    assert len(operations) >= 38  # every operation of the API (none dropped by a schema error)
    assert not failures, "\n\n".join(f"{label}:\n{why}" for label, why in failures.items())
