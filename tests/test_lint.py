"""The code stays as `make lint` wants it: ruff, configured in pyproject.toml, finds nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    """ruff reports no finding over service/, analytics/, tests/ and benchmarks/."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "service", "analytics", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# Sanic reads a request's form with ``parse_qs(errors="replace")``: bytes that are not UTF-8 become
# U+FFFD without a word, and one raw byte can lose every field. Request bodies are read by
# ``service.bodies`` (the API) and ``console.pages.posted`` (the console, strictly for the forms it
# sends; Sanic's reading only for another content type, which none of its forms sends).
BODY_READERS = {"form", "files", "json", "load_json", "get_form"}
ALLOWED_BODY_READS = {("service/console/pages.py", "posted", "form")}


def _body_reads(path: Path) -> set[tuple[str, str, str]]:
    """(file, enclosing function, attribute) for each ``request.<reader>`` in ``path``."""
    import ast

    found = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in BODY_READERS
                and isinstance(node.value, ast.Name)
                and node.value.id == "request"
            ):
                found.add((path.relative_to(ROOT).as_posix(), function.name, node.attr))
    return found


def test_request_bodies_are_read_only_by_the_strict_readers() -> None:
    """No route reads ``request.form`` (or ``files``, ``json``) itself: a new one would store what
    Sanic guessed a client's bytes meant."""
    reads = set().union(*(_body_reads(path) for path in sorted((ROOT / "service").rglob("*.py"))))
    assert reads == ALLOWED_BODY_READS
