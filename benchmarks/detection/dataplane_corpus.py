"""Labelled series measured from the real dataplane, for `run.py --extra`.

    .venv/bin/python benchmarks/detection/dataplane_corpus.py --out corpus.json [--commits 48]
        [--backend sim] [--backend tsc --tsc-reps 5]

Builds a scratch history of the project's dataplane in which each `dataplane/regressions/` patch
is applied at a known commit and reverted a few commits later; every other commit changes
documentation only. Each commit is built and measured with `perfci measure` (the agent's own code
path). The labels come from the history, not from the measurements: a step at every apply and every
revert of a patch that changes the metric by design — for `sim` instructions per packet every patch
(a, c, d add instructions, e adds one barrier per burst, b removes one prefetch per packet); for
`tsc` cycles per packet the patches that cost cycles in the self-fed harness (a, c, d; b only with
cold packet data, and e's barrier per 32 packets is within the noise), which is a statement about
the dataplane that the run itself checks.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "agents")]

from perfci_agent.demo.history import Step, append_line, apply_patch, import_dataplane, make_history  # noqa: E402
from perfci_agent.measure import measure  # noqa: E402

CONFIG = "self-64B-short"
# (patch, apply at commit index, revert at index, metrics/backends whose level it moves by design)
PLAN = (
    ("a-store-forward-block.patch", 6, 12, {"sim", "tsc"}),
    ("c-per-packet-tx.patch", 16, 21, {"sim", "tsc"}),
    ("d-helper-out-of-line.patch", 25, 31, {"sim", "tsc"}),
    ("e-full-barrier.patch", 34, 38, {"sim"}),
    ("b-prefetch-removed.patch", 41, 45, {"sim"}),
)
METRIC = {"sim": "ipp", "tsc": "cpp"}


def plan_steps(n: int) -> tuple[list[Step], dict[str, list[int]]]:
    events: dict[int, Step] = {}
    labels: dict[str, list[int]] = {"sim": [], "tsc": []}
    for patch, on, off, moves in PLAN:
        if off >= n:
            continue
        events[on] = Step(f"apply {patch}", apply_patch(patch))
        events[off] = Step(f"revert {patch}", apply_patch(patch, reverse=True))
        for backend in moves:
            labels[backend] += [on, off]
    steps = [Step("import the dataplane", import_dataplane)]
    for i in range(1, n):
        steps.append(events.get(i) or Step(f"docs: note {i}", append_line("dataplane/README.md", f"\nNote {i}.")))
    return steps, {k: sorted(v) for k, v in labels.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commits", type=int, default=48)
    ap.add_argument("--backend", action="append", choices=["sim", "tsc"], help="default: sim")
    ap.add_argument("--tsc-reps", type=int, default=5)
    ap.add_argument("--workdir", type=Path, help="keep the scratch repository and build cache here")
    args = ap.parse_args(argv)
    backends = args.backend or ["sim"]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="perfci-corpus-"))
    repo = work / "repo"
    steps, labels = plan_steps(args.commits)
    if repo.exists():
        sys.exit(f"{repo} exists; give an empty --workdir")
    commits = make_history(repo, ROOT, tuple(steps))
    series = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    for backend in backends:
        points = []
        with Progress(*columns) as progress:
            task = progress.add_task(f"measuring {len(commits)} commits ({backend})", total=len(commits))
            for c in commits:
                doc = measure(repo, c.sha, backend=backend, reps=1 if backend == "sim" else args.tsc_reps,
                              config=CONFIG, cache_dir=work / "cache")
                if doc.status != "ok":
                    sys.exit(f"{c.sha[:12]} ({c.subject}): {doc.status}: {doc.reason}")
                values = [m.value for s in doc.samples for m in s.metrics if m.metric == METRIC[backend]]
                points.append({"commit": c.sha, "values": values})
                progress.advance(task)
        series.append({"name": f"dataplane-{backend}-{METRIC[backend]}", "metric": METRIC[backend], "backend": backend,
                       "points": points, "steps": labels[backend]})
    args.out.write_text(json.dumps({"series": series}, indent=1))
    print(f"wrote {args.out}: {', '.join(s['name'] for s in series)}; steps {labels}; scratch repo {repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
