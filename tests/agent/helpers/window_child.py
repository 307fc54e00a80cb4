"""A stand-in for the dataplane's --perf-ctl/--perf-ack protocol (used to test the perf control path).

Usage: window_child.py CTL_FD ACK_FD WARMUP_S WINDOW_S
Spins WARMUP_S seconds, writes ``enable`` to CTL_FD and waits for ``ack`` on ACK_FD, spins
WINDOW_S seconds, then ``disable`` and ``ack`` again. Prints the spin times it used as JSON.
"""

import json
import os
import sys
import time


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def command(ctl: int, ack: int, word: str) -> None:
    os.write(ctl, word.encode() + b"\n")
    reply = b""
    while b"\n" not in reply and len(reply) < 16:  # perf writes "ack\n\0"
        chunk = os.read(ack, 16)
        if not chunk:
            break
        reply += chunk
    if not reply.startswith(b"ack"):
        sys.exit(f"perf did not ack {word!r}: {reply!r}")


def main() -> None:
    ctl, ack = int(sys.argv[1]), int(sys.argv[2])
    warmup, window = float(sys.argv[3]), float(sys.argv[4])
    spin(warmup)
    command(ctl, ack, "enable")
    spin(window)
    command(ctl, ack, "disable")
    spin(warmup)
    print(json.dumps({"warmup_s": warmup, "window_s": window}))


if __name__ == "__main__":
    main()
