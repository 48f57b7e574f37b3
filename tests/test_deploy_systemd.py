"""deploy/systemd: the server and worker units pass `systemd-analyze verify` and keep their exposure low."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT
from tests.tools import require_tool

UNITS = ROOT / "deploy" / "systemd"
INSTANCES = {
    "service-server@.service": "service-server@8000.service",
    "service-worker@.service": "service-worker@8001.service",
}
INSTALLED_PYTHON = "/opt/service/.venv/bin/python"
# systemd-analyze security's exposure scale is 0.0 (locked down) to 10.0; --threshold counts tenths.
MOST_EXPOSURE = 20  # 2.0: "OK"; each unit measures 1.3 today


@pytest.fixture
def units(tmp_path: Path) -> Path:
    """The units as shipped, ExecStart pointed at this machine's Python (verify checks it exists)."""
    for template in INSTANCES:
        text = (UNITS / template).read_text()
        assert INSTALLED_PYTHON in text
        (tmp_path / template).write_text(text.replace(INSTALLED_PYTHON, sys.executable))
    return tmp_path


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    tool = require_tool("systemd-analyze", "deploy/systemd is checked with systemd-analyze verify")
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_units_pass_systemd_analyze_verify(units: Path) -> None:
    """Each template, instantiated, verifies with no error and no warning (an unknown key is one)."""
    result = analyze("verify", *INSTANCES.values(), cwd=units)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_verify_catches_a_misspelt_hardening_key(units: Path) -> None:
    """The check can fail: a misspelt directive is reported, so a clean run means something."""
    server = units / "service-server@.service"
    server.write_text(server.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"))
    result = analyze("verify", "service-server@8000.service", cwd=units)
    assert "Unknown key 'NoNewPrivilege'" in result.stderr


def test_units_are_hardened(units: Path) -> None:
    """Both run as the service user, read secrets from a root-only file, and score OK on exposure."""
    for template, instance in INSTANCES.items():
        text = (units / template).read_text()
        for line in (
            "User=service",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "EnvironmentFile=/etc/service/service.env",
            "RestartPreventExitStatus=2",
            "StartLimitIntervalSec=0",  # a database down for a while is waited for, not given up on
        ):
            assert re.search(rf"^{re.escape(line)}$", text, re.MULTILINE), (template, line)
        result = analyze("security", "--offline=true", f"--threshold={MOST_EXPOSURE}", instance, cwd=units)
        assert result.returncode == 0, result.stdout
        assert "Overall exposure level" in result.stdout


def test_servers_believe_only_the_local_proxy() -> None:
    """The server unit trusts forwarded headers from nginx on loopback only; servers never deliver."""
    text = (UNITS / "service-server@.service").read_text()
    assert "Environment=SANIC_PROXIES_COUNT=1 SERVICE_TRUSTED_PROXIES=127.0.0.1" in text
    assert "serve --no-worker --host 127.0.0.1 --port %i" in text
