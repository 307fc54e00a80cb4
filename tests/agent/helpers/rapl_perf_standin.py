"""Stands in for ``perf stat -a -x, -e power/energy-pkg/,power/energy-ram/ -o OUT -D -1
--control fd:CTL,ACK -- CMD`` on a machine without RAPL (the agent's energy path, tested here).

Runs CMD, answers its window ``enable``/``disable`` on the control FIFOs as perf does (``ack\\n\\0``)
and writes OUT in perf's CSV format (tests/agent/fixtures/rapl/README.md) with a package drawing
40 W and DRAM 4 W over the window. Refuses an argv the agent would not give perf.
"""

import os
import select
import subprocess
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    assert args[:3] == ["stat", "-a", "-x,"], args
    assert args[args.index("-e") + 1] == "power/energy-pkg/,power/energy-ram/", args
    assert args[args.index("-D") + 1] == "-1", args
    out = args[args.index("-o") + 1]
    ctl, ack = (int(fd) for fd in args[args.index("--control") + 1].removeprefix("fd:").split(","))
    child = subprocess.Popen(args[args.index("--") + 1:], pass_fds=(ctl, ack))
    seen: dict[str, float] = {}
    buf = b""
    while child.poll() is None:
        ready, _, _ = select.select([ctl], [], [], 0.05)
        if ready:
            buf += os.read(ctl, 64)
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                seen[line.decode().strip()] = time.monotonic()
                os.write(ack, b"ack\n\0")
    seconds = seen["disable"] - seen["enable"]
    with open(out, "w") as f:
        f.write("Events disabled\nEvents enabled\nEvents disabled\n")
        f.write(f"{40 * seconds:.2f},Joules,power/energy-pkg/,{int(seconds * 1e9)},100.00,,\n")
        f.write(f"{4 * seconds:.2f},Joules,power/energy-ram/,{int(seconds * 1e9)},100.00,,\n")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
