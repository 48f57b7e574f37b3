"""What the README and docs/ say of the code's own names and figures is what the code has.

Each of these drifted once: a reserve, a count of senders, the range of migrations, the admin
routes and the error codes were all right when written and wrong a few changes later.
"""

from __future__ import annotations

import re
from pathlib import Path

from service import connections
from service.app import create_app
from service.settings import Settings
from service.webhooks.lanes import Lanes
from service.webhooks.worker import CONCURRENCY, most_slots

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
# Where the service spells an error's code: a field error (field, code, message), a query
# parameter's (field, code, message), a partner URL's, a body's and a pydantic custom error's
# (code, message), and the waitlist's map from pydantic's error types (type: (code, message)).
CODE_SITES = (
    re.compile(r'FieldError\(\s*(?:f?"[^"]*"|[\w.\[\]]+(?:\([^()]*\))?)\s*,\s*"([a-z_]+)"'),
    re.compile(r'\binvalid\(\s*(?:f?"[^"]*"|[\w.]+)\s*,\s*"([a-z_]+)"'),
    re.compile(r'(?:UnsafeURL|PydanticCustomError|_body_error)\(\s*"([a-z_]+)"'),
    re.compile(r'^\s*"[a-z_]+"\s*:\s*\("([a-z_]+)",', re.MULTILINE),
)


# A route's parameter as Sanic spells it (<partner_id:str>), as the README does ({id}).
PARAMETER = re.compile(r"<\w+(?::\w+)?>")
# The migrations' range, written with an en dash as the rest of the document writes ranges.
MIGRATIONS = re.compile("revisions 0001\N{EN DASH}(\\d{4})")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_readme_names_the_connection_reserves_the_code_keeps() -> None:
    found = re.search(r"less a reserve \((\d+), and (\d+) more when the process delivers webhooks", README)
    assert found is not None, "the README's SERVICE_MAX_CONNECTIONS row names the reserves"
    assert (int(found[1]), int(found[2])) == (connections.RESERVE, connections.WORKER_RESERVE)


def test_the_architecture_gives_the_lingering_close_its_bounds() -> None:
    seconds = re.search(r"for ([\d.]+) s\s+\(`LINGER_FOR`\) or (\d+) MiB \(`LINGER_BYTES`\)", ARCHITECTURE)
    assert seconds is not None
    assert (float(seconds[1]), int(seconds[2]) << 20) == (connections.LINGER_FOR, connections.LINGER_BYTES)


def test_the_architecture_counts_the_workers_default_senders() -> None:
    counts = [int(count) for count in re.findall(r"(\d+) senders", ARCHITECTURE)]
    assert counts, "docs/architecture.md names the worker's senders"
    assert set(counts) == {CONCURRENCY}


def test_the_architecture_names_the_last_migration() -> None:
    versions = ROOT / "service" / "db" / "migrations" / "versions"
    last = max(int(path.name[:4]) for path in versions.glob("[0-9][0-9][0-9][0-9]_*.py"))
    named = MIGRATIONS.search(ARCHITECTURE)
    assert named is not None
    assert int(named[1]) == last


def test_the_readmes_admin_guide_names_every_admin_route(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'routes.db'}", admin_token="a" * 40)
    app = create_app(settings, name="docs_routes")
    routes = {
        f"{method} /{PARAMETER.sub('{id}', route.path)}"
        for route in app.router.routes
        if route.path.startswith("admin/")
        for method in route.methods
        if method not in ("HEAD", "OPTIONS")
    }
    assert "POST /admin/partners/{id}/rotate-secret" in routes and len(routes) >= 15
    guide = _section(README, "## Admin guide")
    # Named alone, before its body (`POST /admin/events {...}`) or with its query (`GET ...?limit=`).
    missing = sorted(route for route in routes if not any(f"`{route}{end}" in guide for end in "` ?"))
    assert not missing, f"admin routes the README's admin guide does not name: {missing}"


def test_the_architecture_lists_every_error_code_the_service_spells() -> None:
    codes = {
        code
        for path in (ROOT / "service").rglob("*.py")
        for site in CODE_SITES
        for code in site.findall(path.read_text())
    }
    # The sites above are found: a pattern that matched nothing would pass vacuously.
    assert {"unknown_field", "invalid_json", "forbidden_address", "invalid_choice", "conflict"} <= codes
    listed = ARCHITECTURE[ARCHITECTURE.index("`code` a\nstable token") :][:1200]
    missing = sorted(code for code in codes if f"`{code}`" not in listed)
    assert not missing, f"error codes docs/architecture.md does not list: {missing}"


def test_the_loan_the_docs_name_is_the_default_workers() -> None:
    """The reserve's loan to a partner, as the README and docs/architecture.md give it."""
    loan = Lanes(lambda started: None, pool=most_slots(CONCURRENCY), senders=CONCURRENCY).loan
    assert f"an eighth of the reserve, {loan}," in " ".join(ARCHITECTURE.split())
    assert f"borrows {loan} senders of it at most" in " ".join(README.split())
