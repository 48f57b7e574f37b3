"""Identifiers: prefixed ULIDs, random in service, reproducible from a seed for demo data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ulid import ULID
from webhook_helpers import Receiver, onboard, settings

from service.app import create_app
from service.ids import SeededIds, new_id
from service.settings import Settings
from tests.conftest import Client

AT = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)


def _ulid(identifier: str, prefix: str) -> ULID:
    head, _, tail = identifier.partition("_")
    assert head == prefix
    return ULID.from_str(tail)


def test_new_ids_are_prefixed_ulids_of_now_and_never_repeat() -> None:
    made = [new_id("ptn") for _ in range(1000)]
    assert len(set(made)) == 1000
    stamps = {_ulid(identifier, "ptn").datetime for identifier in made}
    assert all(abs(stamp - datetime.now(UTC)) < timedelta(minutes=1) for stamp in stamps)


def test_seeded_ids_follow_the_clock_and_repeat_with_the_seed() -> None:
    now = [AT]

    def sequence(seed: str) -> list[str]:
        ids = SeededIds(lambda: now[0], seed)
        made = []
        for step in range(3):
            now[0] = AT + timedelta(seconds=step)
            made.append(ids("ptn"))
        return made

    first, again, other = sequence("demo"), sequence("demo"), sequence("other")
    assert first == again
    assert not set(first) & set(other)
    assert [_ulid(identifier, "ptn").datetime for identifier in first] == [
        AT + timedelta(seconds=step) for step in range(3)
    ]
    assert first == sorted(first)  # time-ordered, like any ULID


def test_the_admin_api_names_partners_from_the_apps_id_source(sqlite_url: str, clock: Any) -> None:
    def app_ids() -> SeededIds:
        return SeededIds(clock, "partners")

    expected = app_ids()
    app = create_app(Settings(database_url=sqlite_url, **settings()), clock=clock, ids=app_ids())
    with Receiver() as receiver, Client(app) as client:
        made = [onboard(client, receiver.url(f"/{n}"))["id"] for n in range(2)]
    assert made == [expected("ptn"), expected("ptn")]
