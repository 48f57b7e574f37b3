"""The partner pages in Chromium: no console error, nothing fetched from another origin, no axe-core violation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from processes import free_port, start_server, stop

from tests.tools import chromium

PAGES = ["/docs/webhooks/", "/docs/webhooks/event-catalog", "/docs/webhooks/verifying-signatures"]
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m service serve` on loopback, its base URL that address."""
    folder: Path = tmp_path_factory.mktemp("pages")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"SERVICE_DATABASE_URL": f"sqlite:///{folder / 'service.db'}", "SERVICE_BASE_URL": base}
    server = start_server(port, env, "--no-worker", log=folder / "server.log")
    try:
        yield base
    finally:
        stop(server)


@pytest.mark.parametrize("path", PAGES)
def test_a_page_renders_with_no_error_no_other_origin_and_no_violation(base_url: str, path: str) -> None:
    """The page loads its stylesheet, logs no console error (a CSP refusal would be one), asks no other
    origin for anything, and axe-core finds no WCAG 2.1 A/AA violation."""
    from axe_playwright_python.sync_playwright import Axe

    origin = urlsplit(base_url).netloc
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        requested: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: requested.append(request.url))
        response = page.goto(base_url + path, wait_until="load")
        assert response is not None and response.status == 200
        styled = page.evaluate("getComputedStyle(document.body).fontFamily")
        headings = page.get_by_role("heading", level=1).all_inner_texts()
        nav = page.get_by_role("navigation", name="Partner pages").get_by_role("link").all_inner_texts()
        results = Axe().run(page, options={"runOnly": {"type": "tag", "values": WCAG_21_AA}})
    assert errors == []
    assert requested and all(urlsplit(url).netloc == origin for url in requested), requested
    assert f"{base_url}/docs/webhooks/pages.css" in requested
    assert "system-ui" in styled  # the same-origin stylesheet applied
    assert len(headings) == 1
    assert "This page as Markdown" in nav
    assert results.response["testEngine"]["name"] == "axe-core"
    assert results.response["passes"]  # the rules ran and found things to pass
    violations = [(rule["id"], len(rule["nodes"])) for rule in results.response["violations"]]
    assert violations == []
