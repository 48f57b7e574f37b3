"""The analytics package reads data: importing it, or any module of it, starts no server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Every module of the package, imported in a fresh interpreter, then everything that came with them.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import analytics
for module in pkgutil.iter_modules(analytics.__path__, "analytics."):
    importlib.import_module(module.name)
print(json.dumps(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def imported() -> set[str]:
    """The names in sys.modules after a fresh interpreter imported every analytics module."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


def test_every_analytics_module_was_imported(imported: set[str]) -> None:
    """The import really covered the package, readers and the notebook renderer alike."""
    expected = {"analytics.load", "analytics.waitlist", "analytics.deliveries", "analytics.render"}
    assert expected <= imported


@pytest.mark.parametrize(
    "module",
    [
        "service.app",  # the app factory: routes, lifecycle, the worker
        "service.webhooks.worker",  # the delivery worker
        "service.demo",  # the demo generator, which starts the service
        "aiohttp.web",  # aiohttp's server side (its client may come with the event models)
        "sanic",  # the web framework itself
    ],
)
def test_no_server_module_comes_with_analytics(imported: set[str], module: str) -> None:
    """Nothing that serves HTTP, delivers webhooks or drives the service is imported."""
    assert module not in imported
