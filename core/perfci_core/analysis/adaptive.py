"""Adaptive re-measurement: which commits get more repetitions when detection sees suspects.

One implementation, used by the server (``alerts/confirm.py`` turns the requests into confirm
jobs) and by the detection benchmark (which draws the extra repetitions from its noise model).

The loop: detect; for each :class:`~.detect.Suspect` ask one more *round* (one job's worth of
repetitions) of each commit it names that has had fewer than ``Policy.max_rounds`` extra rounds;
when the repetitions arrive they join the commit's others and detection decides again. A suspect
is settled when detection stops reporting it: confirmed (it became a change, pinned for an
``unpinned`` one) or rejected (the extra repetitions took the evidence away). It is *exhausted*
when all its commits had ``max_rounds`` rounds or the budget is spent: it stays undecided and
nothing more is measured for it until new commits change the picture.

Interleaved pairs (``Policy.paired``, off by default): in each round of a suspect at ``k``, the commits ``k - 1``
and ``k`` are one request pair (:attr:`Request.partner`), measured A B A B in one session, each
pair of runs sharing the host's moment; detection tests those pairs on their own (the paired
test of :mod:`.detect`), which a host drifting between jobs cannot fool. The suspect's other
commits are measured as separate jobs, as before: the jobs' test over the boundary still needs them.

The rounds of a plan are measured in a seeded random order (:func:`run_order`), not in series
order: detection tests the jobs of the commits before a suspect against those from it on, and a
host that drifts during a round would otherwise always favour the same side.

Budget, per series (one machine x config): extra repetitions <= ``budget_fraction`` x the
repetitions measured for the commits themselves (the baseline). Requests that do not fit are
dropped, the strongest suspect (detection orders them by p) is served first, and a round is
never split (a job measures the config's repetitions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .detect import Suspect


@dataclass(frozen=True)
class Policy:
    budget_fraction: float = 0.30  # extra repetitions / baseline repetitions, per series
    # Extra rounds per commit (each one job of the config's repetitions). Pinning a 2 % step in
    # 3-4 % noise takes a few dozen more repetitions of the commits around it: on the detection
    # benchmark's tuning seeds (11-40) 2-3 % recall was 0.908 / 0.931 / 0.960 at 4 / 8 / 12 rounds,
    # spending 5.0 / 6.8 / 7.7 % extra repetitions (the budget caps it at 30 %).
    max_rounds: int = 12
    # Measure each suspect's k - 1 and k interleaved (module doc). Off by default: on the detection
    # benchmark's tuning seeds 11-30 (real noise) it delayed reports (mean of per-seed median delays
    # 4.3 commits against 3.6) at the same recall and budget; on a host drifting 3 % between jobs it
    # found 25 of 47 synthetic 2-3 % steps against 23 (seeds 11-20). With 2 % drift between jobs and the rounds'
    # alpha spent over their looks (`run.py --adaptive --quick --job-drift 0.02`, seeds 11-13) they tie: 7 of 8
    # synthetic 2-3 % steps and 22 of 22 >= 3 % either way, false alerts 0.16 against 0.08 per 1000 commits, delay
    # 2.7 against 3.7, extra repetitions 17.1 % against 16.7 %; real noise delay 6.8 against 5.0 (docs/detection.md).
    paired: bool = False


@dataclass(frozen=True)
class Request:
    """One more round of repetitions of ``commit`` (its ``round``-th extra one), and why."""

    commit: str
    round: int  # 1, 2, ... (round 0 is the commit's own push or bisect measurement)
    suspect: Suspect
    partner: str | None = None  # the commit measured interleaved with this one in the same session
    partner_round: int = 0  # the partner's round in that session

    @property
    def reason(self) -> str:
        s = self.suspect
        return (f"{s.why} {s.kind.value} {s.percent:+.2f}% of {s.metric}/{s.backend} at {s.suspect[:12]} "
                f"(p={s.p_value:.2g}): round {self.round}")


@dataclass(frozen=True)
class Plan:
    requests: tuple[Request, ...]  # suspects neither here nor in `exhausted` wait for rounds under way
    exhausted: tuple[Suspect, ...]  # suspects nothing more is measured for (rounds or budget spent)
    spent: int  # extra repetitions before this plan
    budget: int  # extra repetitions allowed for the series


def budget(baseline_repetitions: int, policy: Policy = Policy()) -> int:
    return int(policy.budget_fraction * baseline_repetitions)


def plan(suspects: tuple[Suspect, ...] | list[Suspect], rounds: Mapping[str, int], spent: int,
         baseline_repetitions: int, repetitions_per_round: int, policy: Policy = Policy(),
         waiting: frozenset[str] | set[str] = frozenset()) -> Plan:
    """The next rounds to measure for ``suspects`` (one series' detection result).

    ``rounds``: extra rounds each commit already had or has queued; ``spent``: extra repetitions
    already measured or queued for the series; ``baseline_repetitions``: the series' own
    repetitions; ``waiting``: commits whose last round has not arrived yet — a suspect touching
    one waits for it (detection decides on the evidence before more is asked). Pure and
    idempotent: rounds already counted are never asked again.
    """
    if repetitions_per_round < 1:
        raise ValueError("repetitions_per_round must be at least 1")
    allowed = budget(baseline_repetitions, policy)
    left = allowed - spent
    asked: set[str] = set()
    requests: list[Request] = []
    exhausted: list[Suspect] = []
    for s in suspects:
        if waiting.intersection(s.commits):
            continue
        due = [c for c in s.commits if rounds.get(c, 0) < policy.max_rounds]
        new = [c for c in due if c not in asked]  # the rest is asked already for a stronger suspect
        if not due or len(new) * repetitions_per_round > left:
            exhausted.append(s)  # a suspect is measured as a whole or not at all: half the evidence decides nothing
            continue
        pair = _pair(s, new) if policy.paired else ()
        for c in new:
            partner = next((x for x in pair if x != c), None) if c in pair else None
            requests.append(Request(c, rounds.get(c, 0) + 1, s, partner, rounds.get(partner, 0) + 1 if partner else 0))
            asked.add(c)
        left -= len(new) * repetitions_per_round
    return Plan(tuple(requests), tuple(exhausted), spent, allowed)


def _pair(s: Suspect, new: Sequence[str]) -> tuple[str, ...]:
    """The suspect commit and the one before it, when both are asked in this round (one of them
    already asked for a stronger suspect is measured with that one's round, unpaired)."""
    i = s.commits.index(s.suspect) if s.suspect in s.commits else 0
    if i < 1 or s.commits[i - 1] not in new or s.suspect not in new:
        return ()
    return (s.commits[i - 1], s.suspect)


def run_order(requests: Sequence[Request], seed: Sequence[int]) -> tuple[Request, ...]:
    """The order a plan's rounds are queued, and so measured, in: a random permutation drawn from
    ``seed`` (reproducible). A plan lists each suspect's commits in series order; measured that
    way, any drift of the host during a round (it warms up, a neighbour starts) would fall on the
    commits after the suspect and read as a step. Shuffled, it favours either side by chance only
    — why ``compare --measure`` draws the order inside each pair (the agent's ``pair_order``)."""
    picks = np.random.default_rng([int(x) for x in seed]).permutation(len(requests))
    return tuple(requests[int(i)] for i in picks)
