"""The operations module: use cases written once, domain errors only, the notifier told of changes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from webhook_helpers import Receiver, room_claimed

from service.db.engine import create_engine
from service.errors import from_domain
from service.exceptions import DomainError, InvalidInput, StateConflict, UnknownResource
from service.settings import Settings
from service.webhooks import wiring
from service.webhooks.operations import DeliveryFilter, Operations


class Recorder:
    """A notifier that remembers what it was told."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def deliveries_due(self) -> None:
        self.told.append("deliveries_due")

    def rooms_changed(self) -> None:
        self.told.append("rooms_changed")


@pytest.fixture
async def operations(database_url: str, clock: Any) -> AsyncIterator[tuple[Operations, Recorder]]:
    settings = Settings(database_url=database_url, webhook_allow_private_urls=True)
    engine = create_engine(database_url)
    notifier = Recorder()
    async with wiring.sender(settings, clock=clock) as sender:
        yield Operations(engine, settings, clock, sender, notifier=notifier), notifier
    await engine.dispose()


async def test_a_partner_lifecycle_tells_the_notifier(operations: tuple[Operations, Recorder]) -> None:
    """Onboard, pause, publish, resume, retry: each changes storage and wakes the worker only when
    deliveries became due."""
    ops, notifier = operations
    with Receiver() as receiver:
        partner = await ops.onboard({"name": "Acme", "url": receiver.url()})
        assert partner["secret"] and "secret" not in await ops.show_partner(partner["id"])
        assert (await ops.pause(partner["id"]))["status"] == "paused"
        assert notifier.told == []
        event = {**room_claimed(), "eventId": "evt_once"}  # room.claimed dedupes on its eventId
        first = await ops.publish(event)
        assert first["deliveries"] == 1
        assert notifier.told == ["deliveries_due", "rooms_changed"]
        repeat = await ops.publish(event)
        assert repeat == {"eventId": first["eventId"], "deliveries": 0}
        assert notifier.told == ["deliveries_due", "rooms_changed"]
        assert (await ops.resume(partner["id"]))["status"] == "active"
        assert notifier.told[-1] == "deliveries_due"
        assert await ops.retry(partner["id"]) == {"partnerId": partner["id"], "requeued": 0}
        listed = await ops.list_deliveries(DeliveryFilter(partner_id=partner["id"]))
        assert [(d["partnerId"], d["status"]) for d in listed["deliveries"]] == [(partner["id"], "pending")]


@pytest.mark.parametrize("name", ["show_partner", "pause", "resume", "test", "rotate_secret", "retry"])
async def test_an_unknown_partner_is_an_unknown_resource(operations: tuple[Operations, Recorder], name: str) -> None:
    """Every per-partner operation raises UnknownResource, which the HTTP layer answers 404."""
    ops, notifier = operations
    with pytest.raises(UnknownResource) as raised:
        await getattr(ops, name)("ptn_missing")
    assert from_domain(raised.value).status_code == 404
    assert raised.value.body() == {"ok": False, "message": "No partner has this id."}
    assert notifier.told == []


@pytest.mark.parametrize(
    ("error", "status"),
    [(InvalidInput(), 400), (UnknownResource(), 404), (StateConflict(), 409), (DomainError(), 500)],
)
def test_domain_errors_map_to_one_status_each(error: DomainError, status: int) -> None:
    """The HTTP layer is the only place a domain error becomes a status; the body is kept."""
    answer = from_domain(error)
    assert (answer.status_code, answer.body()) == (status, error.body())


@pytest.mark.parametrize(
    ("args", "field"),
    [({"status": "lost"}, "status"), ({"limit": "0"}, "limit"), ({"offset": "-1"}, "offset"), ({"since": "x"}, "since")],
)
def test_delivery_filters_refuse_what_they_do_not_know(args: dict[str, str], field: str) -> None:
    """A listing's parameters are checked once, for the route and the command alike."""
    with pytest.raises(InvalidInput) as raised:
        DeliveryFilter.parse(args)
    assert [error.field for error in raised.value.field_errors] == [field]


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("service.webhooks.runtime", "service.webhooks.admin"),
        ("service.webhooks.operations", "sanic"),
        ("service.registrations_ops", "sanic"),
        ("service.exceptions", "service"),
    ],
)
def test_layers_import_one_way(module: str, forbidden: str) -> None:
    """The runtime does not import the routes, operations know nothing of HTTP, and the domain
    errors import nothing of the service."""
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(any(m == {forbidden!r} or m.startswith({forbidden!r} + '.') for m in sys.modules "
        f"if m != {module!r} and not {module!r}.startswith(m + '.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
