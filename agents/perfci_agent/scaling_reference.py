"""A host's scaling reference: Amdahl's serial fraction B of one scaling measurement.

The calibration role (``perfci_calibration_scaling``) runs ``perfci measure --config
self-64B-scaling --json`` once on a tuned bare-metal host and keeps what this prints as the host's
reference: B fitted to the median PPS at each lcore count over the repetitions (the same fit as
every result, :mod:`perfci_core.analysis.scaling`), its bootstrap interval, B on the calibrated
throughput, the throughputs, and what the calibration loop says moved from one lcore to the most.
B needs three or more lcore counts: from fewer (a 2-core host) the reference has the throughputs
and the calibration, no B, and says why.

    python -m perfci_agent.scaling_reference RESULT.json [--json]

Exit status: 0 a reference with B; 2 the document is unreadable, not ``ok``, or not a scaling
result; 3 a scaling result with too few lcore counts for B (the reference is printed, without B).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from pydantic import ValidationError

from perfci_core.analysis import scaling
from perfci_core.result import ResultDocument


class ReferenceError(Exception):
    pass


def reference(doc: ResultDocument) -> dict:
    if doc.status != "ok":
        raise ReferenceError(f"the result is {doc.status}: {doc.reason}")
    reps = [scaling.throughputs(s.raw) for s in doc.samples]
    reps = [r for r in reps if len(r) >= 2 and 1 in r]
    if not doc.config.scaling or not reps:
        raise ReferenceError(f"config {doc.config.name!r} is not a scaling measurement (no runs at two or more lcore counts)")
    counts = sorted(set.intersection(*(set(r) for r in reps)))
    medians = {n: statistics.median(r[n] for r in reps) for n in counts}
    why = scaling.unidentified(counts)
    ci = scaling.serial_fraction_interval([{n: r[n] for n in counts} for r in reps])
    calibrated = [scaling.calibrated_throughputs(s.raw) for s in doc.samples]
    calibrated = [c for c in calibrated if set(counts) <= c.keys()]
    return {
        "serial_fraction": None if why else scaling.fit_serial_fraction(medians).serial,
        "serial_fraction_calibrated": None if why or not calibrated else scaling.fit_serial_fraction(
            {n: statistics.median(c[n] for c in calibrated) for n in counts}).serial,
        "why_no_serial_fraction": why,
        "interval": list(ci) if ci else None,
        "calibration": scaling.attribution([s.raw for s in doc.samples]),
        "lcores": counts,
        "pps": {str(n): medians[n] for n in counts},
        "scaling_efficiency": scaling.efficiency(counts[-1], medians[counts[-1]], medians[1]),
        "repetitions": len(reps),
        "commit": doc.commit,
        "machine_id": doc.machine_id,
        "backend": doc.backend.value,
        "measured_at": doc.finished_at.isoformat(),
    }


def summary(ref: dict) -> str:
    pps = ", ".join(f"{n} lcore{'s' if n != '1' else ''} {v / 1e6:.2f} Mpps" for n, v in ref["pps"].items())
    if ref["serial_fraction"] is None:
        head = f"no serial fraction: {ref['why_no_serial_fraction']}"
    else:
        ci = ref["interval"]
        interval = f" (95 % interval {ci[0]:.3f}-{ci[1]:.3f} over {ref['repetitions']} repetitions)" if ci else " (one repetition: no interval)"
        head = f"serial fraction B = {ref['serial_fraction']:.3f}{interval}"  # B on both: the attribution's end
    text = (f"{head}; median PPS {pps}; efficiency at {ref['lcores'][-1]} lcores {ref['scaling_efficiency']:.2f} "
            f"(commit {ref['commit'][:12]}, backend {ref['backend']})")
    return text + (f". {ref['calibration']}" if ref["calibration"] else "; no calibration loop figures")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfci_agent.scaling_reference", description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="a scaling result document (perfci measure --json)")
    parser.add_argument("--json", action="store_true", help="print the reference as JSON")
    args = parser.parse_args(argv)
    try:
        doc = ResultDocument.model_validate_json(args.result.read_text())
        ref = reference(doc)
    except (OSError, ValidationError, ReferenceError) as exc:
        print(f"error: {args.result}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(ref, indent=2, sort_keys=True) if args.json else summary(ref))
    return 0 if ref["serial_fraction"] is not None else 3


if __name__ == "__main__":
    sys.exit(main())
