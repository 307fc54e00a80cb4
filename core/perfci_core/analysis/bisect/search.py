"""The bisection search: endpoints, scan, search and confirm, one decision per call of
:meth:`Bisection.next` (docs/design.md, "Bisection")."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import numpy as np

from ..compare import Comparison, Kind, Verdict, compare, kind_of
from ..noise import MAD_TO_SIGMA
from ..paired import can_reject, paired_compare
from ..series import resolve_metric
from .outcome import Outcome, State, change_text, comparison_dict, finite_or_none, move_text, step_record, with_article
from .policy import MIN_EFFECT_FLOOR, MIN_NOISE_RESIDUALS, STEP_SHARE, Measure, Observation, Policy, Sampled, Status, paired_samples


class Bisection:
    """One bisection over commits ``0 .. n-1`` (0 = good, n-1 = bad, first-parent order)."""

    def __init__(self, n: int, policy: Policy, state: State | None = None,
                 observations: Mapping[int, Observation] | None = None) -> None:
        if n < 2:
            raise ValueError("a bisection needs a good and a bad commit (n >= 2)")
        self.n, self.policy = n, policy
        self.state = state or State(n, direction=policy.direction)
        if self.state.direction != policy.direction:
            raise ValueError(f"the stored search hunts {self.state.direction!r}, the policy {policy.direction!r}")
        self.obs: dict[int, Observation] = dict(observations or {})
        self.fresh: dict[int, Observation] = {}  # confirmation repetitions
        self.outcome: Outcome | None = None

    # --- input ---------------------------------------------------------------------------------

    def record(self, index: int, samples: Sequence[float] = (), *, unbuildable: bool = False,
               exhausted: bool = False, fresh: bool = False, session: int = 0) -> None:
        """``session``: the interleaved session the samples were measured in (0: alone)."""
        book = self.fresh if fresh else self.obs
        o = book.setdefault(index, Observation())
        o.samples.extend(float(x) for x in samples)
        o.sessions.extend([session] * len(samples))
        o.unbuildable = o.unbuildable or unbuildable
        o.exhausted = o.exhausted or exhausted

    def _o(self, i: int, fresh: bool = False) -> Observation:
        return (self.fresh if fresh else self.obs).get(i) or Observation()

    def count(self, index: int, fresh: bool = False) -> int:
        """Repetitions recorded for commit ``index`` (search or confirmation ones)."""
        return len(self._o(index, fresh).samples)

    def _towards(self, c: Comparison, target: Kind) -> float:
        """How far a comparison's medians moved in the searched direction (negative: the other way)."""
        if not math.isfinite(c.rel_change) or c.rel_change == 0:
            return 0.0
        metric = resolve_metric(self.policy.metric) if self.policy.metric else None
        along = kind_of(metric, c.before_median, c.after_median) in (target, Kind.CHANGE)
        return abs(c.rel_change) if along else -abs(c.rel_change)

    # --- the search ----------------------------------------------------------------------------

    def next(self) -> Measure | Outcome:
        """What to measure next, or the outcome. Call again after recording the measurements."""
        while self.outcome is None:
            phases = {"endpoints": self._endpoints, "scan": self._scan, "search": self._search, "confirm": self._confirm}
            step = phases[self.state.phase]()
            if step is not None:
                return step
        return self.outcome

    def _finish(self, outcome: Outcome) -> None:
        self.state.phase = "done"
        self.outcome = outcome

    def _compare(self, a: Observation, b: Observation, min_effect: float) -> Comparison:
        """On the pairs when the two commits were measured interleaved in enough sessions to reach
        alpha (a host drifting between jobs cannot fool the paired test; :mod:`.paired`), else on
        all their samples. Whether the pairs can reach alpha depends on the sizes of their
        differences only, not their signs, so choosing the test this way keeps its level."""
        p = self.policy
        alpha = p.look_alpha(min(len(a.samples), len(b.samples)))  # this look's share (Policy.spending)
        if not p.exact:
            before, after = paired_samples(a, b)
            if before.size and can_reject(before, after, alpha, p.metric):
                return paired_compare(before, after, p.metric, alpha=alpha, min_effect=min_effect, tolerance=p.tolerance)
        return compare(a.samples, b.samples, p.metric, backend="sim" if p.exact else None,
                       alpha=alpha, min_effect=min_effect, noise=self._noise(), tolerance=p.tolerance)

    def _noise(self) -> float | None:
        """Relative per-repetition noise pooled over every commit measured more than once.

        From within-commit pairwise differences (scale sigma x sqrt 2), MAD-style around zero:
        residuals around each commit's own median would shrink it (with 5 repetitions one
        residual is always 0), and an underestimated noise makes SAME too easy.
        """
        if self.policy.exact:
            return None
        groups = [np.asarray(o.samples) for o in (*self.obs.values(), *self.fresh.values()) if len(o.samples) >= 2]
        diffs = [np.abs(g[:, None] - g[None, :])[np.triu_indices(g.size, 1)] for g in groups]
        if sum(d.size for d in diffs) < MIN_NOISE_RESIDUALS:
            return None
        level = float(np.median(np.concatenate(groups)))
        if level == 0:
            return None
        return MAD_TO_SIGMA * float(np.median(np.concatenate(diffs))) / math.sqrt(2.0) / abs(level)

    def _more(self, pairs: Sequence[tuple[int, bool]]) -> tuple[tuple[int, int], ...]:
        """Repetitions to add (+step, up to the cap) to the commits of UNKNOWN comparisons."""
        p = self.policy
        wants = {}
        for i, fresh in pairs:
            o = self._o(i, fresh)
            if o.can_grow(p.max_reps):
                wants[i] = min(p.max_reps, max(len(o.samples), p.initial_reps) + p.step_reps)
        return tuple(sorted(wants.items()))

    def _initial(self, indices: Sequence[int], fresh: bool = False) -> tuple[tuple[int, int], ...]:
        p = self.policy
        return tuple((i, p.initial_reps) for i in indices
                     if not self._o(i, fresh).unbuildable and len(self._o(i, fresh).samples) < p.initial_reps
                     and not self._o(i, fresh).exhausted)

    def _step_effect(self, c: Comparison) -> float:
        """The minimum effect of a search over a range that moved by ``c``: half of it (at least the floor)."""
        p = self.policy
        return p.min_effect if p.min_effect is not None else max(MIN_EFFECT_FLOOR, STEP_SHARE * abs(c.rel_change))

    # --- moves against the hunted kind ----------------------------------------------------------

    def _opposite(self, c: Comparison) -> bool:
        hunted = self.state.hunted
        return (hunted is not None and c.verdict is Verdict.DIFFERENT
                and c.kind in (Kind.REGRESSION, Kind.IMPROVEMENT) and c.kind.value != hunted)

    def _note_opposing(self, a: int, b: int, c: Comparison, seen: str) -> None:
        """Record a move against the hunted kind seen between commits ``a`` and ``b``. A move seen
        again inside a range already recorded (the scan narrowing it down) replaces that range."""
        s = self.state
        if s.stage != "hunt" or not self._opposite(c):
            return
        move = {"good": a, "bad": b, "kind": c.kind.value, "change_pct": finite_or_none(100.0 * c.rel_change),
                "p_value": finite_or_none(c.p_value), "exact": c.exact, "seen": seen}
        s.opposing = [m for m in s.opposing
                      if not (m["kind"] == move["kind"] and m["good"] <= a and b <= m["bad"])] + [move]

    def _check_opposing(self, a: int, b: int, c: Comparison, seen: str) -> None:
        """Judge a search step for a move against the hunted kind at the floor, not at the search's
        minimum effect (half the hunted change): a +1.6 % regression is a move worth reporting
        even while a -6.4 % improvement is followed. The exact rule ignores the minimum effect."""
        if not self.policy.exact and (self.state.min_effect or 0.0) > self.policy.floor:
            c = self._compare(self._o(a), self._o(b), self.policy.floor)
        self._note_opposing(a, b, c, seen)

    # --- phases --------------------------------------------------------------------------------

    def _endpoints(self) -> Measure | None:
        s, p = self.state, self.policy
        good, bad = 0, self.n - 1
        for i, name in ((good, "good"), (bad, "bad")):
            if self._o(i).unbuildable:
                self._finish(self._with_direction(Outcome("inconclusive", f"the {name} commit does not build")))
                return None
        wants = self._initial((good, bad))
        if wants:
            return Measure(wants, "endpoints: good and bad")
        c = self._compare(self._o(good), self._o(bad), p.floor)
        if c.verdict is Verdict.UNKNOWN:
            more = self._more(((good, False), (bad, False)))
            if more:
                return Measure(more, f"endpoints undecided (p = {c.p_value:.3g})")
            self._finish(self._with_direction(Outcome(
                "inconclusive", f"good and bad not distinguishable at {p.max_reps} repetitions "
                f"({change_text(c.rel_change)}, p = {c.p_value:.3g})", overall=c)))
            return None
        if p.direction == "any":
            if c.verdict is Verdict.SAME:
                self._finish(self._with_direction(Outcome(
                    "no_change", f"good and bad are the same ({change_text(c.rel_change)}, p = {c.p_value:.3g})", overall=c)))
                return None
            s.hunted = c.kind.value
        else:
            s.hunted = p.direction
        s.steps.append(step_record("endpoints", good, bad, None, c, None, c.verdict.value))
        if c.verdict is Verdict.DIFFERENT and c.kind.value == s.hunted:
            s.kind, s.min_effect, s.phase = c.kind.value, self._step_effect(c), "search"
            return None
        # The endpoints do not show the hunted kind (the same, or the other kind): scan inside.
        self._note_opposing(good, bad, c, "endpoints")
        shown = "the same" if c.verdict is Verdict.SAME else f"an overall {c.kind.value} of {change_text(c.rel_change)}"
        s.notes.append(f"good and bad show {shown}: scanning the range for a {s.hunted}")
        s.queue, s.phase = [[good, bad]], "scan"
        return None

    def _middle(self, lo: int | None = None, hi: int | None = None) -> int | None:
        lo = self.state.lo if lo is None else lo
        hi = self.state.hi if hi is None else hi
        candidates = [i for i in range(lo + 1, hi) if not self._o(i).unbuildable]
        if not candidates:
            return None
        centre = (lo + hi) / 2
        return min(candidates, key=lambda i: (abs(i - centre), i))

    def _scan(self) -> Measure | None:
        """Look for the hunted kind inside sub-ranges whose ends do not show it (see the module doc)."""
        s, p = self.state, self.policy
        if not s.queue:
            self._hunt_done(Outcome("no_change", f"no {s.hunted} between good and bad at the "
                                    f"{'exact rule' if p.exact else f'{p.floor:.1%} floor'}"))
            return None
        a, b = s.queue[0]
        mid = self._middle(a, b)
        ends = (a, b) if mid is None else (a, mid, b)
        wants = self._initial(ends)
        if wants:
            return Measure(wants, f"scan: commits {a}..{b} for a {s.hunted}")
        if any(self._o(i).unbuildable for i in ends):
            return None  # recorded meanwhile: the next middle skips it
        halves = [(a, b)] if mid is None else [(a, mid), (mid, b)]
        cs = [self._compare(self._o(x), self._o(y), p.floor) for x, y in halves]
        if any(c.verdict is Verdict.UNKNOWN for c in cs):
            more = self._more([(i, False) for i in ends])
            if more:
                return Measure(more, f"scan: commits {a}..{b} undecided")
        s.queue.pop(0)
        s.steps.append(step_record("scan", a, b, mid, cs[0], cs[1] if mid is not None else None,
                             " / ".join(f"{x}->{y} {c.verdict.value} {c.kind.value}" for (x, y), c in zip(halves, cs))))
        hunted = [(x, y, c) for (x, y), c in zip(halves, cs) if c.verdict is Verdict.DIFFERENT and c.kind.value == s.hunted]
        if hunted:  # the earliest half that moved the hunted way: the ordinary search from here
            x, y, c = hunted[0]
            for other in hunted[1:]:
                s.notes.append(f"another {s.hunted} ({change_text(other[2].rel_change)}) between commits {other[0]} and "
                               f"{other[1]} was not searched")
            for (hx, hy), hc in zip(halves, cs):
                self._note_opposing(hx, hy, hc, "scan")
            s.lo, s.hi, s.kind, s.min_effect, s.phase = x, y, s.hunted, self._step_effect(c), "search"
            s.queue = []
            return None
        deeper = []
        for (x, y), c in zip(halves, cs):
            if self._opposite(c):
                self._note_opposing(x, y, c, "scan")
                if mid is not None:
                    deeper.append([x, y])  # may hide the hunted kind behind a bigger opposite move
            elif c.verdict is Verdict.UNKNOWN:
                s.notes.append(f"scan: commits {x}..{y} undecided at {p.max_reps} repetitions ({change_text(c.rel_change)}); "
                               "not looked into")
        s.queue = deeper + s.queue
        return None

    def _search(self) -> Measure | None:
        s = self.state
        mid = self._middle()
        if mid is None:
            s.phase = "confirm"
            return None
        wants = self._initial((mid,))
        if wants:
            return Measure(wants, f"middle of {s.hi - s.lo + 1} commits")
        if self._o(mid).unbuildable:
            return None  # recorded meanwhile: the next middle skips it
        target = Kind(s.kind)
        me = s.min_effect or 0.0
        r_lo = self._compare(self._o(s.lo), self._o(mid), me)
        r_hi = self._compare(self._o(mid), self._o(s.hi), me)

        def moved(c: Comparison) -> bool:
            return c.verdict is Verdict.DIFFERENT and c.kind is target

        # Exactly one side moving in the searched direction places the change. SAME alone is not
        # trusted: at a few repetitions it can hide a real step, so the other side must move.
        if moved(r_lo) != moved(r_hi):
            side, why = ("hi", "lo->mid moved") if moved(r_lo) else ("lo", "mid->hi moved")
        else:
            pairs = [(i, False) for i in (s.lo, mid, s.hi)]
            more = self._more(pairs)
            if more:
                return Measure(more, f"commit {mid}: undecided ({r_lo.verdict.value} {change_text(r_lo.rel_change, 2)} / "
                                     f"{r_hi.verdict.value} {change_text(r_hi.rel_change, 2)})")
            side = "hi" if self._towards(r_lo, target) >= self._towards(r_hi, target) else "lo"
            why = "at the repetition cap: the larger move decides"
            s.notes.append(f"commit {mid}: {why}")
        s.steps.append(step_record("search", s.lo, s.hi, mid, r_lo, r_hi, why, s.stage))
        self._check_opposing(s.lo, mid, r_lo, "search")
        self._check_opposing(mid, s.hi, r_hi, "search")
        if side == "hi":
            s.hi = mid
        else:
            s.lo = mid
        return None

    def _confirm(self) -> Measure | None:
        s, p = self.state, self.policy
        parent, culprit = s.lo, s.hi
        skipped = tuple(i for i in range(parent + 1, culprit) if self._o(i).unbuildable)
        fresh = p.remeasure
        wants = self._initial((parent, culprit), fresh=True) if fresh else ()
        if wants:
            return Measure(wants, "confirm: culprit and parent again", fresh=True)
        c = self._compare(self._o(parent, fresh), self._o(culprit, fresh), s.min_effect or 0.0)
        target = Kind(s.kind)
        confirmed = c.verdict is Verdict.DIFFERENT and c.kind is target
        if not confirmed:  # as in the search, SAME at a few repetitions is not the last word
            more = self._more(((parent, fresh), (culprit, fresh)))
            if more:
                return Measure(more, f"confirm undecided (p = {c.p_value:.3g})", fresh=fresh)
        if not confirmed:
            status: Status = "unconfirmed"
            msg = f"commit {culprit} did not differ from its parent again ({c.verdict.value}, {change_text(c.rel_change)})"
        elif skipped:
            status = "ambiguous"
            msg = f"the first {target.value} is commit {culprit} or one of the unbuildable {list(skipped)}"
        else:
            status = "culprit"
            msg = f"commit {culprit}: {target.value} {change_text(c.rel_change)}"
        found = Outcome(status, msg, parent, culprit, skipped, target, None, c)
        if s.stage == "hunt":
            self._hunt_done(found)
        else:
            self._isolated(found, c)
        return None

    # --- the end: the hunted result, then the largest opposing move isolated -------------------

    def _hunt_done(self, found: Outcome) -> None:
        s = self.state
        s.first = {"status": found.status, "message": found.message, "parent": found.parent, "culprit": found.culprit,
                   "skipped": list(found.skipped), "kind": found.kind.value, "min_effect": s.min_effect}
        self._isolate_next()

    def _explained(self, move: Mapping) -> bool:
        """An isolated move of the same kind lies in this move's range (seen twice, found once)."""
        return any(o.get("status") == "culprit" and o["kind"] == move["kind"] and move["good"] < o["culprit"] <= move["bad"]
                   for o in self.state.opposing)

    def _isolate_next(self) -> None:
        """Search the largest opposing move not isolated yet (one after the other), then finish."""
        s, p = self.state, self.policy
        todo = [i for i, m in enumerate(s.opposing) if "status" not in m and not self._explained(m)]
        if not (p.isolate_opposing and todo):
            self._finish(self._final())
            return
        s.current = max(todo, key=lambda i: abs(s.opposing[i]["change_pct"] or 0.0))
        move = s.opposing[s.current]
        rel = (move["change_pct"] or 0.0) / 100.0
        s.stage, s.lo, s.hi, s.kind, s.phase = "opposing", move["good"], move["bad"], move["kind"], "search"
        s.min_effect = p.min_effect if p.min_effect is not None else max(MIN_EFFECT_FLOOR, STEP_SHARE * abs(rel))
        s.notes.append(f"isolating the {move['kind']} ({move_text(move)}) seen between commits {move['good']} and {move['bad']}")

    def _isolated(self, found: Outcome, c: Comparison) -> None:
        s = self.state
        assert s.current is not None
        s.opposing[s.current].update(status=found.status, message=found.message, parent=found.parent,
                                     culprit=found.culprit, skipped=list(found.skipped), change=comparison_dict(c))
        self._isolate_next()

    def _final(self) -> Outcome:
        s, f = self.state, self.state.first or {}
        step = None
        if f.get("culprit") is not None:
            fresh = self.policy.remeasure
            step = self._compare(self._o(f["parent"], fresh), self._o(f["culprit"], fresh), f.get("min_effect") or 0.0)
        overall = self._compare(self._o(0), self._o(self.n - 1), self.policy.floor)
        notes = list(s.notes)
        moves = []
        for m in s.opposing:
            m = {**m, "isolated": m.get("status") == "culprit" or self._explained(m),
                 "dismissed": m.get("status") == "unconfirmed"}
            size = f"of {m['change_pct']:+.3f} %" if m["change_pct"] is not None else "from zero"
            what = f"{with_article(m['kind'])} {size} between commits {m['good']} and {m['bad']}"
            if m.get("status") == "culprit":
                notes.append(f"also {what}: isolated at commit {m['culprit']}")
            elif m["isolated"]:
                notes.append(f"also {what}: the one isolated inside it")
            elif m["dismissed"]:
                notes.append(f"{what} was seen once but not again in fresh repetitions: not counted")
            else:
                why = f" ({m['status']}: {m['message']})" if m.get("status") else ""
                notes.append(f"also {what}: not isolated{why}")
            moves.append(m)
        return Outcome(f["status"], f["message"], f["parent"], f["culprit"], tuple(f["skipped"]), Kind(f["kind"]),
                       overall, step, tuple(notes), s.direction, tuple(moves))

    def _with_direction(self, o: Outcome) -> Outcome:
        return replace(o, direction=self.state.direction, notes=tuple(self.state.notes))


Sampler = Callable[[int, int, bool], "Sequence[float] | Sampled | None"]


def run(bisection: Bisection, sample: Sampler, on_step: Callable[[Measure], None] | None = None) -> Outcome:
    """Drive a bisection synchronously. ``sample(index, count, fresh)`` measures ``count`` more
    repetitions of commit ``index`` and returns them (a :class:`Sampled` when they were measured
    interleaved with another commit's), or None when the commit does not build."""
    while True:
        step = bisection.next()
        if isinstance(step, Outcome):
            return step
        if on_step:
            on_step(step)
        for index, reps in step.wants:
            have = bisection.count(index, step.fresh)
            values = sample(index, reps - have, step.fresh)
            if values is None:
                bisection.record(index, unbuildable=True, fresh=step.fresh)
                if step.fresh:
                    bisection.record(index, unbuildable=True)
            elif not values:
                bisection.record(index, exhausted=True, fresh=step.fresh)
            elif isinstance(values, Sampled):
                bisection.record(index, values.values, fresh=step.fresh, session=values.session)
            else:
                bisection.record(index, values, fresh=step.fresh)
