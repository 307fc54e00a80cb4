"""The why of each row of a pull request's comment: what explains that row's metric, never another
row's story (:func:`perfci_core.analysis.explain.why`), from the medians of the merge-base's and the
head's sessions; on ``sim`` also where the instructions and the hazards moved, from the first
session's samples (deterministic: any repetition stands for all)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis.explain import why
from perfci_core.metrics import function_instructions, hazard_sites

from . import repository as pull_sql


class Whys:
    """The whys of one config's rows: ``medians`` by backend, (merge-base, head); ``base_run`` and
    ``head_run`` the first session's runs."""

    def __init__(self, session: Session, base_run: int, head_run: int,
                 medians: Mapping[str, tuple[Mapping[str, float], Mapping[str, float]]]) -> None:
        self.session, self.runs, self.medians = session, (base_run, head_run), medians
        self._where: dict[str, Any] | None = None

    def of(self, metric: str, backend: str) -> str:
        before, after = self.medians.get(backend, ({}, {}))
        return why(metric, before, after, **(self._sim_where() if backend == catalogue.Backend.SIM.value else {}))

    def _sim_where(self) -> dict[str, Any]:
        if self._where is None:
            base, head = (pull_sql.first_sample_raw(self.session, run) for run in self.runs)
            self._where = {"sites_before": hazard_sites(base), "sites_after": hazard_sites(head),
                           "functions_before": function_instructions(base), "functions_after": function_instructions(head)}
        return self._where
