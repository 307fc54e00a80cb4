"""Runs a peer detector inside its own virtual environment (Otava pins numpy; jumpavg is kept
apart the same way). Both see one median per commit. Reads one JSON job from stdin, writes one JSON answer to stdout.

Job: {"tool": "otava" | "jumpavg", "series": [[[rep, ...], ...], ...],
      "delay": [{"series": i, "step": k, "start": s, "checks": [c, ...]}, ...]}
Answer: {"changes": [[index, ...] per series], "delay": [commits or null per delay job]}
Indices are positions of the first point of a new level.
"""

import json
import statistics
import sys


def otava_changes(points):
    from otava.analysis import compute_change_points

    medians = [statistics.median(p) for p in points]
    cps, _ = compute_change_points(medians, window_len=50, max_pvalue=0.001, min_magnitude=0.0)
    return sorted(int(c.index) for c in cps)


def jumpavg_changes(points):
    from jumpavg import classify

    # one median per commit, the form of jumpavg's README example (CSIT classifies one value per build)
    groups = classify([statistics.median(p) for p in points])
    out, pos = [], 0
    for g in groups:
        if pos:
            out.append(pos)
        pos += len(g.run_list) if hasattr(g, "run_list") else g.stats.size
    return out


def main():
    job = json.load(sys.stdin)
    fn = {"otava": otava_changes, "jumpavg": jumpavg_changes}[job["tool"]]
    series = job["series"]
    changes = [fn(s) for s in series]
    delays = []
    for d in job.get("delay", []):
        found = None
        pts = series[d["series"]]
        for c in d["checks"]:
            cps = fn(pts[d["start"]:d["step"] + c + 1])
            if any(abs(d["start"] + k - d["step"]) <= 1 for k in cps):
                found = c
                break
        delays.append(found)
    json.dump({"changes": changes, "delay": delays}, sys.stdout)


if __name__ == "__main__":
    main()
