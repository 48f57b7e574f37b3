"""The repository stands alone: no code, test or document reads or cites anything beside it.

A fresh clone, with nothing next to it, must pass ``make test``. Two checks hold it there: a scan of
the sources for paths that climb out of the repository and for citations of design material that
does not ship with it, and an import of every module of ``service`` and ``analytics`` (plus an app
built and a database migrated) under an audit hook that records every file opened next to the
repository rather than inside it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What is scanned: everything a clone holds but the reference data in tests/data.
SCANNED_DIRS = ("service", "analytics", "tests", "benchmarks", "notebooks", "docs", ".ci")
SCANNED_FILES = (
    "Makefile",
    "pyproject.toml",
    "requirements.lock",
    "environment.yml",
    "README.md",
    "CHANGELOG.md",
)
SCANNED_SUFFIXES = {".py", ".toml", ".md", ".ipynb", ".txt", ".yml", ".ini", ".mako", ".cfg", ""}
SKIPPED_DIRS = {"__pycache__", "data", ".ipynb_checkpoints"}
SELF = Path(__file__).resolve()  # names every pattern it looks for, so it is the one file not scanned
CITATIONS = [
    ("a design file that does not ship", re.compile(r"DESIGN\.md")),
    (
        "a specification that does not ship",
        re.compile(r"\b(?:the|a)\s+spec\b|\bspec(?:'|\u2019)s\b|\bspec\s+\"", re.I),
    ),
    ("a folder beside the repository", re.compile(r"[/\\]shared\b|\bshared[/\\]")),
]
PARENTS = re.compile(r"\.parents\[(\d+)\]")
PARENT_CHAIN = re.compile(r"(?:\.parent\b){2,}")
CLIMB = re.compile(r"[\"'](?:\./)?\.\./([^/\"'\s]*)")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for folder in SCANNED_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            relative = path.relative_to(ROOT)
            if (
                path.is_file()
                and path.suffix in SCANNED_SUFFIXES
                and not SKIPPED_DIRS & set(relative.parts)
                and path != SELF
            ):
                files.append(path)
    return files


def findings(relative: Path, text: str) -> list[str]:
    """Each line of ``text`` (the file at ``relative``) that climbs out of the repository or cites
    what does not ship with it."""
    depth = len(relative.parts)  # parents[depth - 1] is the root; parents[depth] is beside it
    inside = {entry.name for entry in ROOT.iterdir()} | {"var"}  # var/: the service's own data
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{relative}:{number}: {line.strip()[:120]}"
        for reason, pattern in CITATIONS:
            if pattern.search(line):
                found.append(f"{where}  ({reason})")
        if relative.suffix == ".py":
            if any(int(level) >= depth for level in PARENTS.findall(line)):
                found.append(f"{where}  (parents[] past the repository root)")
            if any(match.group(0).count(".parent") >= depth for match in PARENT_CHAIN.finditer(line)):
                found.append(f"{where}  (.parent chain past the repository root)")
        if any(step not in inside for step in CLIMB.findall(line)):
            found.append(f"{where}  (a relative path to something beside the repository)")
    return found


def test_sources_stay_inside_the_repository():
    """No source, test, notebook or document climbs out of the repository or cites files it lacks."""
    files = scanned_files()
    assert ROOT / "tests" / "conftest.py" in files and ROOT / "service" / "app.py" in files
    problems = [
        problem
        for path in files
        for problem in findings(path.relative_to(ROOT), path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('XSD = Path(__file__).resolve().parents[2] / "x.xsd"', "parents[] past the repository root"),
        ("ROOT = Path(__file__).parent.parent.parent", ".parent chain past the repository root"),
        ('open("../../notes.md")', "a relative path to something beside the repository"),
        ('open("../elsewhere/data.xsd")', "a relative path to something beside the repository"),
        ('path = "/work/shared/data/sitemap.xsd"', "a folder beside the repository"),
        ("# see DESIGN" + '.md "Settings"', "a design file that does not ship"),  # split: the file is scanned
        ("# the spec's order", "a specification that does not ship"),
        ('# Spec "Limits": cache', "a specification that does not ship"),
        ('DB = "../var/service.db"', None),
        ("ROOT = Path(__file__).resolve().parents[1]", None),
        ("out.parent.mkdir(parents=True)", None),
    ],
)
def test_the_scan_flags_each_escape(line: str, reason: str | None):
    """The scan flags each kind of escape it looks for in a test module, and passes paths inside."""
    expected = [f"tests/probe.py:1: {line}  ({reason})"] if reason else []
    assert findings(Path("tests/probe.py"), line) == expected


# Run in a child process, so the audit hook sees every module import from scratch and stays out of
# the test session. It prints, as JSON, every path opened outside the repository but beside it.
AUDIT = r"""
import importlib, json, os, pkgutil, sys, sysconfig, tempfile
from pathlib import Path

root = Path(sys.argv[1]).resolve()
opened = []  # (path, working directory); resolved at the end, so the hook stays cheap

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        opened.append((args[0], os.getcwd()))

sys.addaudithook(hook)

for package in ("service", "analytics"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.endswith("__main__") or ".migrations" in info.name:
            continue  # __main__ runs a command; migrations run inside Alembic (migrate, below)
        importlib.import_module(info.name)

from service.app import create_app
from service.db.engine import migrate
from service.settings import Settings

scratch = Path(tempfile.mkdtemp())
url = f"sqlite:///{scratch / 'service.db'}"
migrate(url)
create_app(Settings(database_url=url), name="standalone_check")

allowed = {root, scratch.resolve()}
for name in ("stdlib", "platstdlib", "purelib", "platlib", "include", "scripts", "data"):
    allowed.add(Path(sysconfig.get_path(name)).resolve())
for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, tempfile.gettempdir()):
    allowed.add(Path(prefix).resolve())
beside = root.parent
paths = {Path(os.path.realpath(os.path.join(cwd, os.fsdecode(path)))) for path, cwd in set(opened)}
escaped = sorted(
    str(path) for path in paths
    if path.is_relative_to(beside) and not any(path.is_relative_to(place) for place in allowed)
)
print(json.dumps(escaped))
"""


def test_importing_and_starting_reads_nothing_beside_the_repository(tmp_path: Path):
    """Every module of service/ and analytics/ imports, and an app builds, opening no file beside the repository."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        # Tools may read per-user files on import (matplotlib's config and font cache); here those
        # live in a home of the test's own, never in a directory that happens to sit beside a clone.
        "HOME": str(home),
        "MPLCONFIGDIR": str(home / "matplotlib"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "TMPDIR": str(tmp_path),
    }
    env = {key: value for key, value in env.items() if not key.startswith(("SERVICE_", "SANIC_"))}
    result = subprocess.run(
        [sys.executable, "-c", AUDIT, str(ROOT)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
