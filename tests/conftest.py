"""Shared fixtures: real storage (a SQLite file; PostgreSQL and Redis where the machine has them)
and Sanic's reusable test client, which talks real HTTP to a server on loopback."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from sanic import Sanic
from sanic.router import Router
from sanic_testing.reusable import ReusableClient
from sqlalchemy import delete
from sqlalchemy.engine import make_url

from service.app import create_app
from service.clock import ManualClock
from service.db.engine import MIGRATE_LOCK_SUFFIX, create_engine, migrate
from service.db.tables import metadata
from service.settings import Settings
from tests.processes import free_port
from tests.scratch import admin_execute, migrated_database, redis_keys
from tests.webhook_helpers import TEST_SECRETS_KEY

POSTGRES_URL = os.environ.get("SERVICE_TEST_POSTGRES_URL")
REDIS_URL = os.environ.get("SERVICE_TEST_REDIS_URL")
RUN_ID = uuid.uuid4().hex[:12]
# Reference data the tests hold documents to (the sitemaps.org XML Schemas), kept in the repository.
DATA = Path(__file__).resolve().parent / "data"

Sanic.test_mode = True
# Property tests: no deadline (a pause of this busy process is not a slow example) and no example
# database written into the checkout; tests that need more examples say so in their own settings.
hypothesis.settings.register_profile("suite", deadline=None, database=None)
hypothesis.settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _forget_apps() -> Iterator[None]:
    """After each test, let its apps go. Sanic keeps every app it made in a registry by name, and
    its router caches route lookups (and with them the routers, and their apps) in class-level
    caches of 1,024 entries: over a run the process held every test's app, and each of the
    collector's full collections walked them all (1.2 million objects and pauses of 750 ms after
    300 tests), long enough to fail a test that waits half a second for a real answer. Test
    infrastructure reading Sanic's own attributes: a rename fails every test here at once."""
    yield
    Router.get.cache_clear()
    Router.find_route_by_view_name.cache_clear()
    Sanic._app_registry.clear()


@pytest.fixture
def clock() -> ManualClock:
    """A clock the test moves by hand; nothing waits for real time to pass."""
    return ManualClock()


def _run(coro: Any) -> Any:
    return asyncio.new_event_loop().run_until_complete(coro)


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database of this run's own on the machine's PostgreSQL, dropped afterwards."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    with migrated_database(POSTGRES_URL, f"service_test_{RUN_ID}") as url:
        yield url


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database of this run's own, migrated and never used, copied for ``fresh_postgres``
    (a copy takes a fraction of what migrating takes). Autovacuum leaves its tables alone, and so
    their copies': a plan test's statistics are those it gathers itself."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    with migrated_database(POSTGRES_URL, f"service_test_{RUN_ID}_template") as url:
        for table in metadata.sorted_tables:
            _run(admin_execute(url, f'ALTER TABLE "{table.name}" SET (autovacuum_enabled = off)'))
        yield make_url(url).database or ""


@pytest.fixture
def fresh_postgres(postgres_template: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated, empty PostgreSQL database of the test's own, dropped after it, with
    ``SERVICE_SECRETS_KEY`` set: for tests of what PostgreSQL plans, which the run's shared
    database would decide by statistics its earlier tests left (autovacuum analyzes as it goes)."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)
    name = f"service_test_{RUN_ID}_{uuid.uuid4().hex[:8]}"
    _run(admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}" TEMPLATE "{postgres_template}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _run(admin_execute(POSTGRES_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _empty_tables(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                await conn.execute(delete(table))
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run; each test gets a copy (migrating takes a tenth of a
    second, copying the file a few hundred microseconds, and a copy is the same database)."""
    path = tmp_path_factory.mktemp("migrated") / "service.db"
    migrate(f"sqlite:///{path}")
    # Only the lock migrations take turns under stays (removing it would let two hold it at once).
    beside = {other.name for other in path.parent.glob("service.db-*")}
    assert beside == {"service.db" + MIGRATE_LOCK_SUFFIX}, f"migrating left a journal beside the file: {beside}"
    return path


def _fresh_sqlite(template: Path, folder: Path) -> str:
    """A migrated, empty SQLite database of the test's own, as ``migrate`` would leave it."""
    path = folder / "service.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path, migrated_sqlite: Path) -> str:
    """A migrated, empty database: a fresh SQLite file (its key file made beside it on first use),
    or this run's PostgreSQL database, with ``SERVICE_SECRETS_KEY`` set for the test as it must be."""
    if request.param == "sqlite":
        return _fresh_sqlite(migrated_sqlite, tmp_path)
    url: str = request.getfixturevalue("empty_postgres")
    return url


@pytest.fixture
def empty_postgres(postgres_database: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """This run's PostgreSQL database, emptied, with ``SERVICE_SECRETS_KEY`` set: ``database_url``'s
    PostgreSQL case, for tests of what only PostgreSQL does."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)
    _run(_empty_tables(postgres_database))
    return postgres_database


@pytest.fixture
def sqlite_url(tmp_path: Path, migrated_sqlite: Path) -> str:
    return _fresh_sqlite(migrated_sqlite, tmp_path)


@pytest.fixture(params=["memory", "redis"])
def rate_limit_storage(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Settings for the limiter's storage: process memory, or the machine's Redis."""
    if request.param == "memory":
        yield {"rate_limit_storage": "memory://"}
        return
    if not REDIS_URL:
        pytest.skip("SERVICE_TEST_REDIS_URL is not set: no Redis to test against")
    prefix = f"service-test-{RUN_ID}-{uuid.uuid4().hex[:8]}"
    yield {"rate_limit_storage": REDIS_URL, "rate_limit_key_prefix": prefix}
    _run(redis_keys(REDIS_URL, prefix, delete=True))


class Client:
    """Sanic's ReusableClient with a smaller surface: each call returns the response only."""

    def __init__(self, app: Sanic) -> None:
        self.app = app
        # The loop the server runs on is ours, so ``run`` can use it as well as the client.
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        # A port the kernel says is free: ReusableClient's own pick is random in 5000-65000 and
        # collides with ephemeral ports in use (receivers, client connections, other test runs).
        self._client = ReusableClient(app, port=free_port(), loop=self._loop)

    def __enter__(self) -> Client:
        self._client.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._client.__exit__(*exc)
        finally:
            self._loop.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        _, response = self._client.request(path, http_method=method.upper(), **kwargs)
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("get", path, **kwargs)

    def head(self, path: str, **kwargs: Any) -> Any:
        return self.request("head", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("post", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.request("patch", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("delete", path, **kwargs)

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (to read the database the app writes)."""
        return self._loop.run_until_complete(coro)


MakeClient = Callable[..., Any]


@pytest.fixture
def make_client(sqlite_url: str, clock: ManualClock) -> MakeClient:
    """Build an app from settings overrides and serve it for the length of a `with` block
    (``structured_logs=True``: logging as ``serve`` configures it, see tests/service_logs.py)."""

    @contextmanager
    def build(**overrides: Any) -> Iterator[Client]:
        structured_logs = overrides.pop("structured_logs", False)
        options: dict[str, Any] = {"database_url": sqlite_url, "waitlist_rate_limit": "1000/minute"}
        options.update(overrides)
        app = create_app(
            Settings(**options), clock=overrides.pop("clock", clock), structured_logs=structured_logs
        )
        with Client(app) as client:
            yield client

    return build
