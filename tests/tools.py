"""The real tools some tests drive (chromium, promtool, nginx, systemd-analyze, node, honcho, valgrind).

Where a tool is missing the test skips with the reason; under CI (``SERVICE_TEST_REQUIRE_TOOLS=1``, set by
``.ci/run`` after it installs them) a missing tool fails the test instead, so nothing is skipped silently.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REQUIRED = os.environ.get("SERVICE_TEST_REQUIRE_TOOLS") == "1"
# Debian's chromium, driven by Playwright through executable_path (Playwright never downloads a browser here).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def require_tool(name: str, why: str = "") -> str:
    """The tool's path; without it, skip (or fail under CI) naming the tool."""
    path = shutil.which(name)
    if path:
        return path
    reason = f"{name} is not installed{': ' + why if why else ''}"
    if REQUIRED:
        pytest.fail(f"{reason} (SERVICE_TEST_REQUIRE_TOOLS=1: CI installs it, so its absence is a failure)")
    pytest.skip(reason)
    raise AssertionError("unreachable")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian chromium under Playwright; yields the Browser."""
    executable = require_tool("chromium", "the browser tests drive Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
