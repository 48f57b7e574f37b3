"""``python -m benchmarks.console`` runs end to end on a small store and prints a row for every page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import console

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_console_benchmark_prints_every_page() -> None:
    """Every page answers 200 under the benchmark, and each has its p50 and p95 (no timing asserted)."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.console", "--rows", "300", "--samples", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    rows = [line.strip("|").split("|") for line in completed.stdout.splitlines() if line.startswith("| ")]
    labels = [cells[0].strip() for cells in rows[1:]]
    assert labels == [label for label, _ in console.pages(300)]
    assert all(float(cells[1]) > 0 and float(cells[2]) >= float(cells[1]) for cells in rows[1:])
    assert completed.stdout.splitlines()[-1] in ("PASS", "ABOVE TARGET")
