"""The project builds as it will on a fresh clone, with no deprecation waiting to break it.

`make` installs the project with pip, which builds it with the backend pyproject.toml names. A
deprecated form there is a warning today and a failed install the day setuptools drops it (the
table form of ``project.license`` had a date set for that), so the metadata is built here with
every warning an error, by the backend version the lock pins and the build asks for.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
BUILD = """
import sys
from setuptools import build_meta
print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))
"""


def _build_requirements() -> list[Requirement]:
    return [
        Requirement(line)
        for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    ]


def test_the_build_backend_is_the_version_the_lock_pins() -> None:
    (setuptools,) = (requirement for requirement in _build_requirements() if requirement.name == "setuptools")
    pins = [spec.version for spec in setuptools.specifier if spec.operator == "=="]
    assert pins, "pyproject.toml's [build-system] must pin setuptools exactly (==)"
    locked = re.search(r"^setuptools==(\S+)", (ROOT / "requirements.lock").read_text(), re.MULTILINE)
    assert locked is not None, "requirements.lock must pin setuptools"
    assert pins == [locked[1]], (
        f"the build asks for setuptools {pins[0]}, the lock pins {locked[1]}: move them together"
    )


def test_the_metadata_builds_with_every_warning_an_error(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-W", "error", "-c", BUILD, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    metadata = (tmp_path / built.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: LicenseRef-Proprietary" in metadata
    assert "Name: launch-waitlist-service" in metadata
