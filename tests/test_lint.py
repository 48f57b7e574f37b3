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
