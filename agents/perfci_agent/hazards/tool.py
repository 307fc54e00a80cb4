"""Build memhazard once per source version and valgrind version, and give valgrind a folder to
load it from (``VALGRIND_LIB``): valgrind looks for its tools and its own support files (the core
preload library, default suppressions) in one folder, so that folder links every file of the
installed valgrind's and adds the tool.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import MeasureError

TOOL_SOURCE = Path(__file__).resolve().parent / "tool"
TOOL_NAME = "memhazard"
PLATFORM = "amd64-linux"
VALGRIND_LIBEXEC = Path("/usr/libexec/valgrind")
SDK_HINT = ("the valgrind tool SDK (Debian: apt-get install valgrind meson ninja-build pkg-config; "
            "it ships /usr/include/valgrind/pub_tool_*.h and libcoregrind-amd64-linux.a)")


class ToolUnavailable(MeasureError):
    """memhazard cannot be built or run here; the message names what is missing and how to get it."""


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600, cwd=cwd)
    except FileNotFoundError:
        raise ToolUnavailable(f"memhazard needs {cmd[0]}, which is not installed: {SDK_HINT}") from None


def _fingerprint(libexec: Path) -> str:
    """Hash of the tool's sources and of the valgrind it is linked for."""
    h = hashlib.sha256()
    for path in sorted(TOOL_SOURCE.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    version = _run(["valgrind", "--version"]).stdout.strip()
    h.update(version.encode() + str(libexec).encode())
    return h.hexdigest()[:16]


def _check_sdk() -> None:
    if _run(["pkg-config", "--exists", "valgrind"]).returncode != 0:
        raise ToolUnavailable(f"pkg-config finds no valgrind SDK (valgrind.pc): {SDK_HINT}")
    include = Path(_run(["pkg-config", "--variable=includedir", "valgrind"]).stdout.strip())
    libdir = Path(_run(["pkg-config", "--variable=libdir", "valgrind"]).stdout.strip()) / "valgrind"
    for need in (include / "pub_tool_tooliface.h", libdir / f"libcoregrind-{PLATFORM}.a", libdir / f"libvex-{PLATFORM}.a"):
        if not need.exists():
            raise ToolUnavailable(f"the valgrind tool SDK lacks {need}: {SDK_HINT}")


def memhazard_lib(cache_root: Path | None = None, libexec: Path = VALGRIND_LIBEXEC) -> Path:
    """The ``VALGRIND_LIB`` folder holding memhazard (built on first use, then reused)."""
    if shutil.which("valgrind") is None:
        raise ToolUnavailable("memhazard needs valgrind, which is not installed (Debian: apt-get install valgrind)")
    if not (libexec / "vgpreload_core-amd64-linux.so").exists():
        raise ToolUnavailable(f"valgrind's own files are not in {libexec} (valgrind for amd64 Linux is needed)")
    root = Path(cache_root) if cache_root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfci"
    lib = root / f"memhazard-{_fingerprint(libexec)}"
    tool = lib / f"{TOOL_NAME}-{PLATFORM}"
    if tool.exists():
        return lib
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "memhazard.lock", "w") as lock:  # one builder at a time; the others reuse it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tool.exists():
            return lib
        _check_sdk()
        build = root / f"memhazard-build-{lib.name}"
        shutil.rmtree(build, ignore_errors=True)
        for cmd in (["meson", "setup", str(build), str(TOOL_SOURCE)], ["ninja", "-C", str(build)]):
            r = _run(cmd)
            if r.returncode != 0:
                raise ToolUnavailable(f"building memhazard failed at `{' '.join(cmd[:2])}`: "
                                      f"{(r.stdout + r.stderr).strip()[-2000:]}\n(needs {SDK_HINT})")
        staging = root / f".{lib.name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for f in libexec.iterdir():
            (staging / f.name).symlink_to(f)
        shutil.copy2(build / tool.name, staging / tool.name)
        staging.rename(lib)
        shutil.rmtree(build, ignore_errors=True)
    return lib
