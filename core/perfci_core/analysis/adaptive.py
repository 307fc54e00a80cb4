"""What to measure next when detection reports suspects: confirmation sessions and location rounds.

One implementation, used by the server (``alerts/confirm.py`` turns the requests into confirm jobs)
and by the detection benchmark (which draws them from its noise model). One kind of request per
kind of :class:`~.detect.Suspect`:

- an ``unconfirmed`` suspect gets one more **session** of its bracket: its two commits as partner
  requests that one agent measures A B A B ..., ``Policy.pairs`` pairs, the order inside each pair
  drawn at random, as it measures a pull request's session. Detection judges the bracket on its
  sessions' own pairs (:mod:`.detect.confirmation`): confirmed, rejected (a look said SAME: it
  stops early), or one more session, up to ``Policy.looks``;
- an ``unpinned`` change gets one more **round** of each commit around it (one job of the config's
  repetitions, which joins the commit's own), up to ``Policy.max_rounds`` extra jobs per commit:
  more repetitions there move where the search places the change and let the per-commit test pin
  it. The change was raised before any round; the rounds only locate it.

A suspect is *exhausted* when its looks, its rounds or the budget are spent: it stays undecided and
nothing more is measured for it until new commits change the picture.

Budget, per series (one machine x config): extra repetitions <= ``budget_fraction`` x the
repetitions measured for the commits themselves (the baseline); a session costs ``2 x pairs``, a
round its commits' repetitions. The strongest suspect (detection orders them by p) is served first
and never in part; suspects of several metrics at the same commits share their requests. A plan's
requests are queued in a seeded random order (:func:`run_order`): a host that drifts while they run
favours neither side of a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .detect import Settings, Suspect


@dataclass(frozen=True)
class Policy:
    budget_fraction: float = 0.30  # extra repetitions / baseline repetitions, per series
    pairs: int = 24  # pairs per confirmation session
    looks: int = Settings().confirm_looks  # sessions per bracket (detection spends its alpha over as many)
    # Extra jobs per commit. Pinning a 2 % step in 3-4 % noise takes a few dozen more repetitions of
    # the commits around it: on the detection benchmark's tuning seeds (11-40) 2-3 % recall was
    # 0.908 / 0.931 / 0.960 at 4 / 8 / 12 rounds.
    max_rounds: int = 12


@dataclass(frozen=True)
class Request:
    """One more job of ``commit`` (its ``round``-th extra one), and why. A session's two sides name
    each other as ``partner`` and measure ``repetitions`` pairs; a round measures the config's."""

    commit: str
    round: int  # 1, 2, ... (round 0 is the commit's own push or bisect measurement)
    suspect: Suspect
    partner: str | None = None
    partner_round: int = 0
    repetitions: int | None = None

    @property
    def reason(self) -> str:
        s = self.suspect
        what = (f"session {s.looks + 1} of {s.commits[0][:12]} against {s.commits[-1][:12]}" if self.partner
                else f"round {self.round}")
        return (f"{s.why} {s.kind.value} {s.percent:+.2f}% of {s.metric}/{s.backend} at {s.suspect[:12]} "
                f"(p={s.p_value:.2g}): {what}")


@dataclass(frozen=True)
class Plan:
    requests: tuple[Request, ...]  # suspects neither here nor in `exhausted` wait for jobs under way
    exhausted: tuple[Suspect, ...]  # suspects nothing more is measured for (looks, rounds or budget spent)
    spent: int  # extra repetitions before this plan
    budget: int  # extra repetitions allowed for the series


def budget(baseline_repetitions: int, policy: Policy = Policy()) -> int:
    return int(policy.budget_fraction * baseline_repetitions)


def plan(suspects: Sequence[Suspect], rounds: Mapping[str, int], spent: int, baseline_repetitions: int,
         repetitions_per_round: int, policy: Policy = Policy(),
         waiting: frozenset[str] | set[str] = frozenset()) -> Plan:
    """The next sessions and rounds to measure for ``suspects`` (one series' detection result,
    strongest first).

    ``rounds``: extra jobs each commit already had or has queued; ``spent``: extra repetitions
    already measured or queued for the series; ``baseline_repetitions``: the series' own
    repetitions; ``waiting``: commits whose last extra job has not arrived yet — a suspect touching
    one waits for it (detection decides on the evidence before more is asked). Pure and idempotent:
    jobs already counted are never asked again."""
    if repetitions_per_round < 1 or policy.pairs < 1:
        raise ValueError("repetitions_per_round and pairs must be at least 1")
    allowed = budget(baseline_repetitions, policy)
    left = allowed - spent
    next_round = dict(rounds)
    asked: set[str] = set()
    sessions: set[tuple[str, ...]] = set()
    requests: list[Request] = []
    exhausted: list[Suspect] = []
    for s in suspects:
        if waiting.intersection(s.commits) or (s.why == "unconfirmed" and s.commits in sessions):
            continue  # its jobs are under way, or its session is asked already for a stronger suspect
        if s.why == "unconfirmed":
            before, after = s.commits[0], s.commits[-1]
            cost = 2 * policy.pairs
            if s.looks >= policy.looks or cost > left or asked.intersection(s.commits):
                exhausted.append(s)
                continue
            a, b = next_round.get(before, 0) + 1, next_round.get(after, 0) + 1
            requests += [Request(before, a, s, after, b, policy.pairs), Request(after, b, s, before, a, policy.pairs)]
            next_round[before], next_round[after] = a, b
            sessions.add(s.commits)
        else:
            due = [c for c in s.commits if rounds.get(c, 0) < policy.max_rounds]
            new = [c for c in due if c not in asked]  # the rest is asked already for a stronger suspect
            cost = len(new) * repetitions_per_round
            if not due or cost > left:
                exhausted.append(s)  # measured as a whole or not at all: half the evidence decides nothing
                continue
            for c in new:
                next_round[c] = next_round.get(c, 0) + 1
                requests.append(Request(c, next_round[c], s))
        asked.update(s.commits)
        left -= cost
    return Plan(tuple(requests), tuple(exhausted), spent, allowed)


def run_order(requests: Sequence[Request], seed: Sequence[int]) -> tuple[Request, ...]:
    """The order a plan's requests are queued, and so measured, in: a random permutation drawn from
    ``seed`` (reproducible). A plan lists an unpinned change's commits in series order; measured
    that way, any drift of the host while they run would fall on the commits after the change and
    read as a step. Shuffled, it favours either side by chance only."""
    picks = np.random.default_rng([int(x) for x in seed]).permutation(len(requests))
    return tuple(requests[int(i)] for i in picks)
