"""`python -m dashboards [--check]`: regenerate dashboards/json/ from the factories, or (--check)
exit 1 when the committed JSON is not what the code generates."""

from __future__ import annotations

import argparse
import sys

from . import JSON_DIR
from .generate import stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when out of date")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale()
        for name in out_of_date:
            print(f"out of date: {JSON_DIR / name} (run `python -m dashboards`)", file=sys.stderr)
        return 1 if out_of_date else 0
    changed = write()
    print(f"{len(changed)} dashboard(s) written to {JSON_DIR}" + (f": {', '.join(changed)}" if changed else " (all up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
