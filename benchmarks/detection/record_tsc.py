"""Records identical-build `tsc` runs of perfci-fwd: the real noise of this machine, for run.py's
`real` family.

    .venv/bin/python benchmarks/detection/record_tsc.py --out benchmarks/detection/data/tsc-noise.json \
        [--jobs 8] [--reps 8] [--config self-64B]

One build of the dataplane at HEAD, measured by the agent's own code path (`perfci measure
--backend tsc`) in `--jobs` jobs of `--reps` fresh-process repetitions each. The jobs are kept
apart in the file: repetitions of one job share the host's state at that moment, which is the
structure run.py resamples (a commit draws its repetitions from one job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "agents")]

from perfci_agent.measure import measure  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--config", default="self-64B")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".perfci" / "record-tsc")
    args = ap.parse_args(argv)
    jobs, commit = [], None
    for j in range(args.jobs):
        load = os.getloadavg()[0]
        doc = measure(ROOT, "HEAD", backend="tsc", reps=args.reps, config=args.config, cache_dir=args.cache_dir)
        if doc.status != "ok":
            sys.exit(f"job {j + 1}: {doc.status}: {doc.reason}")
        commit = doc.commit
        cpp = [m.value for s in doc.samples for m in s.metrics if m.metric == "cpp"]
        jobs.append({"loadavg_1m": round(load, 2), "cpp": [round(v, 3) for v in cpp]})
        print(f"job {j + 1}/{args.jobs}: load {load:.2f}, cpp {min(cpp):.1f}-{max(cpp):.1f}", flush=True)
    args.out.write_text(json.dumps({
        "what": "cycles per packet (tsc backend) of one build of perfci-fwd, fresh process per run",
        "command": "benchmarks/detection/record_tsc.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit, "config": args.config, "cpus": os.cpu_count(),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "jobs": jobs,
    }, indent=1) + "\n")
    print(f"wrote {args.out}: {sum(len(j['cpp']) for j in jobs)} runs in {len(jobs)} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
