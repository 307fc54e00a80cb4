"""A tool's output is read as bytes or decoded with replacement: perf, git, valgrind and compilers
print whatever bytes their input, locale or a commit message hold, and a strict decode turns one
stray byte into an exception (the agent once exited at start on perf's error message)."""

from __future__ import annotations

import ast

from tests.layout.import_graph import module_files

DECODING = {"text", "universal_newlines", "encoding"}


def strict_decodes() -> list[str]:
    """Every call that asks for decoded output (text=True, universal_newlines=True or encoding=...)
    without saying what to do with bytes that do not decode (errors=...)."""
    found = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            decodes = any(name in keywords and not (isinstance(keywords[name], ast.Constant) and keywords[name].value in (False, None))
                          for name in DECODING)
            if decodes and "errors" not in keywords and _is_subprocess_call(node):
                found.append(f"{module}:{node.lineno}")
    return found


def _is_subprocess_call(node: ast.Call) -> bool:
    """subprocess.run/Popen/check_output/... or a runner passed in their place (``runner(...)``)."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return name in {"run", "Popen", "check_output", "check_call", "call", "runner"}


def test_subprocess_output_is_never_decoded_strictly():
    assert strict_decodes() == []


def test_the_check_sees_a_strict_decode(tmp_path, monkeypatch):
    from tests.layout import import_graph

    (tmp_path / "mod.py").write_text("import subprocess\nsubprocess.run(['perf'], capture_output=True, text=True)\n"
                                     "subprocess.run(['perf'], capture_output=True, text=True, errors='replace')\n")
    monkeypatch.setattr(import_graph, "PACKAGES", {"probe": tmp_path})
    assert strict_decodes() == ["probe.mod:2"]
