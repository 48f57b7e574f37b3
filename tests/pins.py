"""The exact pins in pyproject.toml, for the tests that hold a library's internals to the version proven."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def exact_pin(distribution: str) -> str | None:
    """The version ``distribution`` is pinned to with ``==`` among the project's dependencies, if it is."""
    for line in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]:
        requirement = Requirement(line)
        if requirement.name == distribution:
            pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            return pins[0] if pins else None
    return None
