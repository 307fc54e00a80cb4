"""The forwarding core when none is given: PERFCI_CORE, else the highest CPU this process may use."""

import os

import pytest

from perfci_agent.errors import UsageError
from perfci_agent.measure import allowed_cores, default_core


def test_without_perfci_core_the_highest_allowed_cpu(monkeypatch):
    monkeypatch.delenv("PERFCI_CORE", raising=False)
    assert default_core() == max(os.sched_getaffinity(0))


def test_perfci_core_names_it_and_leads_the_cores_a_measurement_may_use(monkeypatch):
    lowest = min(os.sched_getaffinity(0))
    monkeypatch.setenv("PERFCI_CORE", f" {lowest} ")
    assert default_core() == lowest
    assert allowed_cores() == [lowest, *sorted(os.sched_getaffinity(0) - {lowest}, reverse=True)]


def test_a_perfci_core_that_is_no_number_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PERFCI_CORE", "two")
    with pytest.raises(UsageError, match="PERFCI_CORE must be a CPU number, got 'two'"):
        default_core()
