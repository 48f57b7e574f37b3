"""What the operator sees without reading logs: partner gauges read from the database, the 410
self-pause warning and counter, ``heldBy`` on deliveries an open circuit holds."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text as sql
from sqlalchemy import update
from webhook_helpers import AUTH, Receiver, Reply, deliveries, drain, onboard, publish, room_claimed, settings

from service.cli import main
from service.clock import ManualClock
from service.db.engine import create_engine
from service.db.summaries import deliveries_query
from service.db.tables import partners
from service.events import parse_event
from service.metrics import NAME_LABEL_MAX, Metrics, name_label
from service.settings import Settings
from service.states import AttemptOutcome, PartnerStatus
from service.webhooks import outbox, wiring, worker_http
from service.webhooks.recorder import Recorder
from service.webhooks.standing import FAILED_COUNT
from tests.tools import require_tool

# A name stored before names were held to one line (an admin API and commands now refuse it):
# quotes, a backslash, a line break, markup, an escape sequence, and longer than a label keeps.
HOSTILE_NAME = 'Evil "quoted" \\ back\nslash <script>alert(1)</script> \x1b[31mred ' + "x" * 80


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of ``name`` in Prometheus text, by its sorted labels."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def by_partner(text: str, name: str) -> dict[str, float]:
    return {dict(labels)["partner"]: value for labels, value in samples(text, name).items()}


def partner_states(text: str) -> dict[str, str]:
    """Each partner's state, from the one series of ``service_webhook_partner_state`` at 1; every
    partner must have exactly one."""
    ones: dict[str, list[str]] = {}
    for labels, value in samples(text, "service_webhook_partner_state").items():
        label = dict(labels)
        ones.setdefault(label["partner"], [])
        if value == 1:
            ones[label["partner"]].append(label["state"])
    assert all(len(states) == 1 for states in ones.values()), ones
    return {partner: states[0] for partner, states in ones.items()}


def names(text: str) -> dict[str, str]:
    return {dict(labels)["partner"]: dict(labels)["name"] for labels in samples(text, "service_webhook_partner_info")}


def scrape(client: Any) -> str:
    response = client.get("/admin/metrics", headers=AUTH)
    assert response.status == 200
    text: str = response.text
    return text


def set_status(database_url: str, client: Any, partner_id: str, status: str) -> None:
    """Set a status the service itself sets (``disabled`` after days of failure) straight in storage."""
    _write_partner(database_url, client, partner_id, status=status)


def onboard_hostile(client: Any, database_url: str, url: str) -> dict[str, Any]:
    """A partner named ``HOSTILE_NAME`` straight in storage, as an earlier release let it be."""
    partner: dict[str, Any] = onboard(client, url, name="Evil")
    _write_partner(database_url, client, partner["id"], name=HOSTILE_NAME)
    return partner


def _write_partner(database_url: str, client: Any, partner_id: str, **values: str) -> None:
    async def write() -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(update(partners).where(partners.c.id == partner_id).values(**values))
        finally:
            await engine.dispose()

    client.run(write())


@contextmanager
def partners_in_every_state(
    make_client: Any, database_url: str, receiver: Receiver
) -> Iterator[tuple[Any, dict[str, str]]]:
    """An app whose partners are: calm (active), down (circuit open, one delivery failed), gone
    (paused itself by answering 410), held (paused by an admin), off (disabled), and one with a
    hostile name. Yields the client and the partner ids by role."""
    options = settings(webhook_breaker_failures=1, webhook_breaker_cooldown=600, webhook_retry_schedule=())
    receiver.script("/down", *[Reply(500)] * 5)
    receiver.script("/gone", Reply(410, "gone"))
    with make_client(database_url=database_url, **options) as client:
        ids = {
            role: onboard(client, receiver.url(f"/{role}"), name=name)["id"]
            for role, name in [("calm", "Calm"), ("down", "Down"), ("gone", "Gone"), ("held", "Held"), ("off", "Off")]
        }
        ids["evil"] = onboard_hostile(client, database_url, receiver.url("/evil"))["id"]
        assert client.post(f"/admin/partners/{ids['held']}/pause", headers=AUTH).status == 200
        set_status(database_url, client, ids["off"], "disabled")
        publish(client, room_claimed())
        assert drain(client) == 4  # calm, down, gone, evil
        yield client, ids


def test_partner_gauges_are_read_from_the_database(make_client: Any, database_url: str) -> None:
    """Circuit, state, stored failures and names are gauges read at scrape time: a fresh app over
    the same database reports the same, and each change shows at the next scrape."""
    with Receiver() as receiver:
        with partners_in_every_state(make_client, database_url, receiver) as (client, ids):
            first = scrape(client)
        role = {partner_id: name for name, partner_id in ids.items()}
        with make_client(database_url=database_url, **settings()) as fresh:  # a new process, counters at zero
            again = scrape(fresh)
            # Counters are this process's own, which has delivered nothing: it shows none.
            assert samples(again, "service_webhook_deliveries_failed_total") == {}
            for text in (first, again):
                assert {role[p]: v for p, v in by_partner(text, "service_webhook_circuit_open").items()} == {
                    "calm": 0, "down": 1, "gone": 0, "held": 0, "off": 0, "evil": 0,
                }  # fmt: skip
                assert {role[p]: s for p, s in partner_states(text).items()} == {
                    "calm": "active", "down": "active", "gone": "paused", "held": "paused", "off": "disabled",
                    "evil": "active",
                }  # fmt: skip
                assert {role[p]: v for p, v in by_partner(text, "service_webhook_failed_deliveries").items()} == {
                    "calm": 0, "down": 1, "gone": 0, "held": 0, "off": 0, "evil": 0,
                }  # fmt: skip
                assert {role[p]: n for p, n in names(text).items()} == {
                    "calm": "Calm", "down": "Down", "gone": "Gone", "held": "Held", "off": "Off",
                    "evil": name_label(HOSTILE_NAME),
                }  # fmt: skip

            for role_name in ("gone", "held", "off"):
                assert fresh.post(f"/admin/partners/{ids[role_name]}/resume", headers=AUTH).status == 200
            assert fresh.post(f"/admin/partners/{ids['down']}/retry", headers=AUTH).json["requeued"] == 1
            assert fresh.delete(f"/admin/partners/{ids['calm']}", headers=AUTH).status == 204
            changed = scrape(fresh)
        assert {role[p]: s for p, s in partner_states(changed).items()} == {
            "down": "active", "gone": "active", "held": "active", "off": "active", "evil": "active",
        }  # fmt: skip
        assert by_partner(changed, "service_webhook_failed_deliveries")[ids["down"]] == 0
        # The resumed circuit is half-open (a probe is due at once): still not closed, still 1.
        assert by_partner(changed, "service_webhook_circuit_open")[ids["down"]] == 1
        assert ids["calm"] not in names(changed)  # a removed partner drops out


def test_a_hostile_partner_name_is_one_escaped_bounded_label(make_client: Any, database_url: str) -> None:
    """The name's quotes and backslash are escaped, its control characters replaced, its length cut:
    the text still parses, with the name on one line of its own series."""
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        partner = onboard_hostile(client, database_url, receiver.url())
        text = scrape(client)
    [line] = [line for line in text.splitlines() if line.startswith("service_webhook_partner_info{")]
    assert '\\"quoted\\" \\\\ back\ufffdslash <script>' in line
    shown = names(text)[partner["id"]]
    assert len(shown) == NAME_LABEL_MAX and shown.endswith("\u2026") and "\x1b" not in shown
    assert HOSTILE_NAME.startswith(shown[:12])


def test_a_partner_pausing_itself_with_410_is_a_warning_and_a_counter(
    make_client: Any, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """410 Gone pauses the partner: one WARNING line naming it and service_webhook_partner_paused_total."""
    with Receiver(Reply(410, "gone")) as receiver, make_client(database_url=database_url, **settings()) as client:
        gone = onboard(client, receiver.url())
        calm = onboard(client, receiver.url("/calm"), name="Calm")
        receiver.script("/calm", Reply(200))
        publish(client, room_claimed())
        with caplog.at_level(logging.WARNING, logger="service.webhooks.worker"):
            assert drain(client) == 2
        text = scrape(client)
        shown = client.get(f"/admin/partners/{gone['id']}", headers=AUTH).json
    warnings = [record for record in caplog.records if "410 Gone" in record.getMessage()]
    assert [(record.levelname, record.partner) for record in warnings] == [("WARNING", gone["id"])]  # type: ignore[attr-defined]
    # Every partner's counter is there from 0 (so a rate sees the first 410); only this one moved.
    assert by_partner(text, "service_webhook_partner_paused_total") == {gone["id"]: 1.0, calm["id"]: 0.0}
    assert partner_states(text)[gone["id"]] == "paused" == shown["status"]
    assert partner_states(text)[calm["id"]] == "active"


def test_every_partner_counter_is_scraped_from_zero_before_it_first_counts(
    make_client: Any, database_url: str
) -> None:
    """In a process that delivers, a partner's attempts (each outcome), circuit changes (each
    change), failed deliveries and 410s are all 0 at the first scrape that knows the partner: a
    series first seen above 0 would hide its first increment from increase(), and a circuit's
    first opening is the one that matters. The next scrape counts from there."""
    outcomes = {"delivered", "retry", "failed", "paused"}
    changes = {"opened", "reopened", "closed", "disabled"}
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        assert drain(client) == 0  # a worker on the app's metrics, as serve starts one
        partner = onboard(client, receiver.url())["id"]
        before = scrape(client)
        publish(client, room_claimed())
        assert drain(client) == 1
        after = scrape(client)

    def counted(text: str, name: str, label: str) -> dict[str, float]:
        found = samples(text, name)
        assert {dict(labels)["partner"] for labels in found} == {partner}
        return {dict(labels)[label]: value for labels, value in found.items()}

    attempts = "service_webhook_attempts_total"
    assert counted(before, attempts, "outcome") == dict.fromkeys(outcomes, 0.0)
    assert counted(after, attempts, "outcome") == {**dict.fromkeys(outcomes, 0.0), "delivered": 1.0}
    circuit = "service_webhook_circuit_changes_total"
    assert counted(before, circuit, "change") == dict.fromkeys(changes, 0.0) == counted(after, circuit, "change")
    for name in ("service_webhook_deliveries_failed_total", "service_webhook_partner_paused_total"):
        assert by_partner(before, name) == {partner: 0.0} == by_partner(after, name)


def test_a_removed_partners_counters_drop_out_unless_they_counted() -> None:
    """A process that has not delivered shows a partner's 410s from 0 and none of its delivery
    counters; once a worker counts into it, the next scrape shows those from 0 too. A partner no
    longer listed (removed) loses the series that never counted, and keeps those that did."""
    metrics = Metrics()

    class Standing:
        def __init__(self, partner_id: str) -> None:
            self.partner_id, self.name, self.status, self.circuit_open, self.failed = (
                partner_id, partner_id, PartnerStatus.ACTIVE, False, 0,
            )  # fmt: skip

    def shown(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return samples(generate_latest(metrics.registry).decode(), name)

    metrics.set_partners([Standing("ptn_a"), Standing("ptn_b")])
    assert set(shown("service_webhook_partner_paused_total")) == {(("partner", "ptn_a"),), (("partner", "ptn_b"),)}
    assert shown("service_webhook_attempts_total") == {}
    Recorder(metrics)  # a worker's
    metrics.set_partners([Standing("ptn_a"), Standing("ptn_b")])
    assert len(shown("service_webhook_attempts_total")) == 8 and len(shown("service_webhook_circuit_changes_total")) == 8
    metrics.inc(metrics.delivery_attempts, "ptn_b", AttemptOutcome.DELIVERED)
    metrics.set_partners([Standing("ptn_a")])  # ptn_b removed
    assert shown("service_webhook_attempts_total") == {
        **{(("outcome", outcome), ("partner", "ptn_a")): 0.0 for outcome in AttemptOutcome},
        (("outcome", "delivered"), ("partner", "ptn_b")): 1.0,
    }
    assert {dict(labels)["partner"] for labels in shown("service_webhook_circuit_changes_total")} == {"ptn_a"}
    assert by_partner(generate_latest(metrics.registry).decode(), "service_webhook_partner_paused_total") == {
        "ptn_a": 0.0
    }


def test_deliveries_held_by_an_open_circuit_say_so(
    make_client: Any, database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending deliveries of a partner whose circuit is open carry heldBy "circuit" in the admin
    listing and the command's; others (a healthy partner's, a delivered one) carry no heldBy."""
    options = settings(webhook_breaker_failures=2, webhook_breaker_cooldown=600)
    with Receiver() as receiver, make_client(database_url=database_url, **options) as client:
        receiver.script("/down", *[Reply(500)] * 2)
        down = onboard(client, receiver.url("/down"), name="Down")
        publish(client, room_claimed("one"))
        publish(client, room_claimed("two"))
        assert drain(client) == 2  # two failures: the circuit opens
        calm = onboard(client, receiver.url("/calm"), name="Calm")
        publish(client, room_claimed("three"))  # due for both; held for the one
        listed = deliveries(client)
        assert client.get(f"/admin/partners/{down['id']}", headers=AUTH).json["circuit"] == "open"
    held = {(d["partnerId"], d["status"], d.get("heldBy")) for d in listed}
    assert held == {(down["id"], "pending", "circuit"), (calm["id"], "pending", None)}
    assert sum(d.get("heldBy") == "circuit" for d in listed) == 3

    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["deliveries", "list", "--partner", down["id"]]) == 0
    printed = json.loads(capsys.readouterr().out)["deliveries"]
    assert [d["heldBy"] for d in printed] == ["circuit"] * 3


async def scrape_a_worker(database_url: str, clock: ManualClock, receiver: Receiver) -> str:
    """A standalone worker's /metrics, as Prometheus reads it, after it delivered one event."""
    engine = create_engine(database_url)
    metrics = Metrics()
    config = Settings(database_url=database_url, **settings())
    try:
        await outbox.publish_event(engine, parse_event(room_claimed("late"), now=clock()), now=clock())
        async with wiring.worker(engine, config, clock=clock, metrics=metrics) as worker:
            assert await worker.drain() >= 1
            app = worker_http.create_app(
                heartbeat=worker, engine=engine, metrics=metrics, clock=clock, stale_after=15.0
            )
            runner = await worker_http.start(app, "127.0.0.1", 0)
            host, port = runner.addresses[0][:2]
            try:
                async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/metrics") as answer:
                    assert answer.status == 200
                    return await answer.text()
            finally:
                await runner.cleanup()
    finally:
        await engine.dispose()


def check_metrics(text: str) -> str:
    """What ``promtool check metrics`` says of the text: nothing when there is nothing to fix."""
    path = require_tool("promtool", "it lints the metrics Prometheus scrapes")
    checked = subprocess.run([path, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return f"exit {checked.returncode}: {checked.stdout}{checked.stderr}".strip()


def test_promtool_finds_nothing_to_fix_in_either_scrape(
    make_client: Any, database_url: str, clock: ManualClock
) -> None:
    """The server's /admin/metrics and the worker's /metrics, with partners in every state (a
    hostile name among them) and every family present, pass promtool check metrics."""
    with Receiver() as receiver:
        with partners_in_every_state(make_client, database_url, receiver) as (client, ids):
            client.get("/api/nothing-here")  # a 4xx counted
            server = scrape(client)
        worker = asyncio.run(scrape_a_worker(database_url, clock, receiver))
    for text in (server, worker):
        assert set(partner_states(text)) == set(ids.values())
        assert check_metrics(text) == "exit 0:"
    assert "service_webhook_partner_paused_total" in server
    assert samples(worker, "service_webhook_worker_stale_after_seconds") == {(): 15.0}
    [turned] = samples(worker, "service_webhook_worker_last_turn_timestamp_seconds").values()
    assert abs(turned - clock().timestamp()) < 60  # the loop turned just now, by the worker's clock
    assert samples(worker, "service_ready") == {(): 1.0} == samples(server, "service_ready")


async def test_a_scrape_without_the_database_says_not_ready_and_shows_no_stale_gauges(
    clock: ManualClock,
) -> None:
    """The worker's /metrics still answers when the database does not: service_ready 0, its
    counters, and none of the gauges only the database can tell."""
    engine = create_engine("postgresql://nobody@127.0.0.1:9/none")  # a closed port: refused at once
    metrics = Metrics()
    metrics.circuit_open.labels("ptn_old").set(1)  # what an earlier scrape had read
    metrics.inc(metrics.partner_paused, "ptn_old")

    class Beat:
        last_turn = 0.0

    app = worker_http.create_app(
        heartbeat=Beat(), engine=engine, metrics=metrics, clock=clock, stale_after=15.0, monotonic=lambda: 0.0
    )
    runner = await worker_http.start(app, "127.0.0.1", 0)
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/metrics") as answer:
            status, text = answer.status, await answer.text()
    finally:
        await runner.cleanup()
        await engine.dispose()
    assert status == 200
    assert samples(text, "service_ready") == {(): 0.0}
    assert samples(text, "service_webhook_circuit_open") == {}
    assert by_partner(text, "service_webhook_partner_paused_total") == {"ptn_old": 1.0}


@pytest.mark.parametrize("part", ["registrations", "delivery"])
def test_service_ready_is_0_whenever_readyz_is_503(make_client, part: str) -> None:
    """The gauge says what /readyz says: with the storage reachable but registrations failing to
    commit (a full disk), or the in-process worker's turns failing, both say not ready."""
    with make_client(**settings()) as client:
        before = samples(scrape(client), "service_ready")
        webhooks = client.app.ctx.webhooks
        running = webhooks.worker
        if part == "registrations":
            client.app.ctx.readiness.failed("registrations")
        else:
            webhooks.worker = type("FailingWorker", (), {"failing": True})()  # its last turn failed
        ready = client.get("/readyz")
        after = samples(scrape(client), "service_ready")
        webhooks.worker = running
    assert before == {(): 1.0}
    assert (ready.status, ready.json[part]) == (503, "failing")
    assert after == {(): 0.0}


async def test_the_worker_says_not_ready_while_its_turns_fail(database_url: str, clock: ManualClock) -> None:
    """The standalone worker's service_ready is 0 while its loop's transactions fail, as its
    /readyz is 503, though the database answers SELECT 1."""
    engine = create_engine(database_url)

    class Beat:
        last_turn = 0.0
        failing = False

    beat = Beat()
    app = worker_http.create_app(
        heartbeat=beat, engine=engine, metrics=Metrics(), clock=clock, stale_after=15.0, monotonic=lambda: 0.0
    )
    runner = await worker_http.start(app, "127.0.0.1", 0)
    host, port = runner.addresses[0][:2]
    seen = []
    try:
        async with aiohttp.ClientSession() as session:
            for failing in (False, True):
                beat.failing = failing
                async with session.get(f"http://{host}:{port}/readyz") as ready:
                    status = ready.status
                async with session.get(f"http://{host}:{port}/metrics") as answer:
                    seen.append((status, samples(await answer.text(), "service_ready")))
    finally:
        await runner.cleanup()
        await engine.dispose()
    assert seen == [(200, {(): 1.0}), (503, {(): 0.0})]


async def query_plan(conn: Any, query: Any) -> list[str]:
    """The lines of the database's plan for ``query``, its values written in."""
    statement = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return [row[-1] for row in await conn.execute(sql(f"EXPLAIN QUERY PLAN {statement}"))]
    # Statistics as the tables are now (empty), not as an earlier test left them: a table analyzed
    # while it held another test's rows is planned for those rows.
    await conn.execute(sql("ANALYZE deliveries, events, partners"))
    # An empty test table is cheapest to read whole, and a few rows cheapest to sort; forbid both
    # to see the path that reads rows in order from an index.
    await conn.execute(sql("SET LOCAL enable_seqscan = off"))
    await conn.execute(sql("SET LOCAL enable_sort = off"))
    return [row[0] for row in await conn.execute(sql(f"EXPLAIN {statement}"))]


async def test_the_failed_count_reads_its_partial_index(database_url: str) -> None:
    """Each scrape counts failed deliveries from ix_deliveries_failed (only failed rows), never by
    walking every delivery, on both databases."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            plan = await query_plan(conn, FAILED_COUNT)
    finally:
        await engine.dispose()
    # That index by name: not ix_deliveries_failed_created, the console's, in creation order.
    assert any(re.search(r"\bix_deliveries_failed\b(?!_)", line) for line in plan), plan


@pytest.mark.parametrize("status", ["failed", "cancelled"])
async def test_the_console_filter_for_a_rare_status_reads_its_partial_index(database_url: str, status: str) -> None:
    """The console's deliveries page filtered to failed or cancelled reads the few such rows in
    creation order from their partial index, never walking the delivered history, on both
    databases (migration 0015)."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = deliveries_query(partner_id=None, status=status, event_id=None, after=None, limit=51)
            plan = await query_plan(conn, query)
    finally:
        await engine.dispose()
    assert any(f"ix_deliveries_{status}_created" in line for line in plan), plan
