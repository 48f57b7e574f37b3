"""Drill 2, at-least-once delivery: every event reaches every partner, signed, byte-identical, through
failures, hangs and SIGKILLed delivery workers.

A loopback receiver plays two partners (one onboarded with ``python -m service partners add``, one
through ``POST /admin/partners``). It fails a seeded third of the requests it gets (500, or the
connection dropped without an answer, or a hang past ``SERVICE_WEBHOOK_TIMEOUT`` before answering),
never more than ``max_failures`` times for one delivery, so the retry schedule always has room left.
Events are published while delivery runs (two with ``python -m service events publish``, the rest
through ``POST /admin/events`` with their own eventIds, repeated until answered, so a publish cut
off by a kill is simply repeated). At seeded points of the publishing the delivery workers are
SIGKILLed and restarted; the publishing waits there until the restart is done, so every kill lands
with events still to come, however long a restart takes on a loaded machine:

- SQLite: the server's in-process worker (``serve``), so the whole server dies and comes back;
- PostgreSQL: two ``python -m service worker`` processes beside a ``serve --no-worker``, killed in
  turn and, for the last kill, both at once.

The drill ends when the receiver has accepted every (partner, event) and the outbox says every
delivery is ``delivered`` (a ``failed`` one would be requeued with ``partners retry`` and counted).
Then every request the receiver got is checked: the signature verifies with
``service.webhooks.signing.verify`` against its partner's secret, every arrival of an eventId has
the same body bytes as its first arrival, a delivery keeps one ``x-service-delivery`` id, and
``x-service-event`` names the body's event.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from benchmarks.drills import stores
from benchmarks.drills.children import CLI_TIMEOUT, Children, KillsDeliverers
from benchmarks.drills.report import DrillDeadline, Report, skipped
from service.webhooks.signing import DELIVERY_HEADER, EVENT_HEADER, SignatureError, verify
from tests.processes import free_port
from tests.webhook_helpers import (
    ADMIN_TOKEN,
    AUTH,
    TEST_SECRETS_KEY,
    Received,
    Receiver,
    milestone,
    room_claimed,
)

DRILL = "at-least-once delivery"
OK, ERROR, DROP, HANG = "ok", "500", "drop", "hang"
HANG_MARGIN = 0.5  # seconds a hang outlasts the webhook timeout
CLI_EVENTS = 1  # events published with `python -m service events publish` (a second each)
POLL = 0.1  # seconds between reads of the outbox while waiting for it to settle


@dataclass(frozen=True)
class Plan:
    events: int = 300
    kills: int = 5
    failure_rate: float = 1 / 3  # of requests, until a delivery has failed max_failures times
    max_failures: int = 3  # per delivery: below the schedule's 8 retries, kills consume some too
    publish_over: float = 20.0  # seconds: events trickle in while deliveries and kills happen
    timeout: float = 1.0  # SERVICE_WEBHOOK_TIMEOUT; the lease is 2 x this + 5 s
    schedule: str = "0.2,0.5,1,1,1,1,1,1"  # SERVICE_WEBHOOK_RETRY_SCHEDULE
    # The receiver fails a third of requests at random, so a partner's circuit opens now and then:
    # a cool-down on the drill's time scale keeps the breaker in play without stalling the run.
    breaker_cooldown: float = 1.0  # SERVICE_WEBHOOK_BREAKER_COOLDOWN
    deadline: float = 240.0  # seconds for the whole drill on one database
    seed: int = 2


FULL = Plan()
SHORT = Plan(
    events=30,
    kills=2,
    publish_over=1.5,
    timeout=0.5,
    schedule="0.1,0.2,0.5,0.5,0.5,0.5,0.5,0.5",
    deadline=60.0,
)


class FlakyReceiver(Receiver):
    """``tests.webhook_helpers.Receiver`` answering from a seeded coin per (delivery, arrival)."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.answers: list[str] = []  # what each of ``self.requests`` was answered
        self.accepted: set[tuple[str, str]] = set()  # (path, eventId) answered 2xx at least once
        self._arrivals: Counter[str] = Counter()
        self._failures: Counter[str] = Counter()

    def __enter__(self) -> FlakyReceiver:
        super().__enter__()
        return self

    def _answer(self, delivery: str) -> str:
        arrival = self._arrivals[delivery]
        self._arrivals[delivery] += 1
        if self._failures[delivery] >= self.plan.max_failures:
            return OK
        coin = random.Random(f"{self.plan.seed}:{delivery}:{arrival}")
        if coin.random() >= self.plan.failure_rate:
            return OK
        self._failures[delivery] += 1
        return coin.choices((ERROR, DROP, HANG), weights=(5, 3, 2))[0]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        with self._changed:
            answer = self._answer(request.headers.get(DELIVERY_HEADER, ""))
            self.requests.append(Received(request.path, dict(request.headers), body, time.time()))
            self.answers.append(answer)
            if answer == OK:
                self.accepted.add((request.path, _event_id(body)))
            self._changed.notify_all()
        if answer == HANG:
            await asyncio.sleep(self.plan.timeout + HANG_MARGIN)  # answered after the sender gave up
        elif answer == DROP:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        elif answer == ERROR:
            return web.Response(status=500, text="drill: failing on purpose")
        return web.Response(text="ok")

    def wait_accepted(self, count: int, timeout: float) -> bool:
        return self.wait_for(lambda _: len(self.accepted) >= count, timeout)


def _event_id(body: bytes) -> str:
    try:
        return str(json.loads(body)["eventId"])
    except (ValueError, KeyError, TypeError):
        return ""


class Publisher:
    """Publishes the events through the admin API on a thread, repeating each until answered.

    It publishes only as far as the drill has allowed (``allow``): the drill holds it back at each
    kill, so events are still to come after every restart and each kill lands mid-run, however
    long a restart takes on a loaded machine.
    """

    def __init__(self, base_url: str, events: list[dict[str, Any]], spread: float, deadline: float) -> None:
        self.base_url = base_url
        self.events = events
        self.interval = spread / max(1, len(events))
        self.deadline = deadline
        self.published: list[str] = []
        self.repeated = 0  # events whose publish had to be sent again: the server was down
        self.error: str | None = None
        self._allowed = 0
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self.deadline = min(self.deadline, time.monotonic())
            self._changed.notify_all()
        self._thread.join(15)

    def allow(self, count: int) -> None:
        """Let the publishing go on up to ``count`` events."""
        with self._changed:
            self._allowed = max(self._allowed, count)
            self._changed.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(max(0.0, timeout))

    def wait_published(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.published) < count and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return self.error is None

    def _run(self) -> None:
        try:
            self._publish_all()
        except Exception as error:  # whatever it is, the drill must hear of it
            self._fail(f"publishing failed: {error!r}")

    def _wait_allowed(self, index: int) -> bool:
        with self._changed:
            while index >= self._allowed:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def _publish_all(self) -> None:
        with httpx.Client(base_url=self.base_url, headers=AUTH, timeout=10) as client:
            paced_from, paced_index = time.monotonic(), 0
            for index, event in enumerate(self.events):
                if index >= self._allowed:
                    if not self._wait_allowed(index):
                        self._fail(f"published {len(self.published)} of {len(self.events)} by the deadline")
                        return
                    paced_from, paced_index = time.monotonic(), index  # the pace resumes from here
                pace = paced_from + (index - paced_index) * self.interval
                time.sleep(max(0.0, pace - time.monotonic()))
                tries = 0
                while True:
                    if time.monotonic() > self.deadline:
                        self._fail(f"published {len(self.published)} of {len(self.events)} by the deadline")
                        return
                    try:
                        answer = client.post("/admin/events", json=event)
                    except httpx.HTTPError:
                        tries += 1
                        time.sleep(0.05)  # the server is being restarted
                        continue
                    if answer.status_code != 202 or answer.json()["eventId"] != event["eventId"]:
                        self._fail(f"publish answered {answer.status_code}: {answer.text[:200]}")
                        return
                    with self._changed:
                        self.published.append(event["eventId"])
                        self.repeated += tries > 0
                        self._changed.notify_all()
                    break

    def _fail(self, error: str) -> None:
        with self._changed:
            self.error = error
            self._changed.notify_all()


class CliPublisher:
    """``python -m service events publish -`` for a few events, on a thread beside the admin API's."""

    def __init__(self, children: Children, settings: dict[str, str], events: list[dict[str, Any]]) -> None:
        self.children = children
        self.settings = settings
        self.events = events
        self.published: list[str] = []
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CliPublisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(CLI_TIMEOUT * len(self.events))

    def _run(self) -> None:
        try:
            for event in self.events:
                answer = self.children.cli(
                    self.settings, "events", "publish", "-", stdin=json.dumps(event).encode()
                )
                self.published.append(answer["eventId"])
        except Exception as error:  # whatever it is, the drill must hear of it
            self.error = f"events publish: {error!r}"


def _events(count: int) -> list[dict[str, Any]]:
    """Two kinds, each with an eventId of our own: a publish repeated after a kill is idempotent."""
    made = []
    for index in range(count):
        data = room_claimed(f"drill-{index}") if index % 2 else milestone(f"drill {index}", index)
        made.append({**data, "eventId": f"evt_drill_{index:05d}"})
    return made


def _wait_settled(url: str, expected: int, timeout: float) -> Counter[str]:
    """Poll the outbox until every delivery is settled (delivered or failed), or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        states = stores.delivery_states(url)
        if states["delivered"] + states["failed"] >= expected or time.monotonic() > deadline:
            return states
        time.sleep(POLL)  # reading another process's progress; the deadline bounds it


class Drill(KillsDeliverers):
    """One run on one database: the processes, the partners, the kills, and what came of them."""

    def __init__(
        self, kind: str, plan: Plan, report: Report, url: str, receiver: FlakyReceiver, children: Children
    ) -> None:
        self.kind = kind
        self.plan = plan
        self.report = report
        self.url = url
        self.receiver = receiver
        self.children = children
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.settings = {
            "SERVICE_DATABASE_URL": url,
            "SERVICE_BASE_URL": self.base_url,
            "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
            "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY,  # PostgreSQL needs one; every process shares it
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
            "SERVICE_WEBHOOK_TIMEOUT": str(plan.timeout),
            "SERVICE_WEBHOOK_RETRY_SCHEDULE": plan.schedule,
            "SERVICE_WEBHOOK_BREAKER_COOLDOWN": str(plan.breaker_cooldown),
        }
        # SQLite: the server delivers (its in-process worker). PostgreSQL: two workers beside it.
        self.server_args = () if kind == "sqlite" else ("--no-worker",)
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.secrets: dict[str, str] = {}  # receiver path -> partner secret
        self.kills = self.restarts = self.admin_retries = 0
        self.publishers: tuple[Publisher, CliPublisher] | None = None  # reported even after a failure

    @property
    def expected(self) -> int:
        return self.plan.events * len(self.secrets)

    def start(self) -> None:
        """Server, workers and both partners, side by side; nothing is published before all are up."""
        children = self.children
        self.server = children.start_server("server", self.port, self.settings, *self.server_args)
        added = children.cli(
            self.settings, "partners", "add", "--name", "drill-cli", "--url", self.receiver.url("/cli")
        )
        self.secrets["/cli"] = added["secret"]
        # The workers bind their probes' ports as the kernel picks them, which could be the
        # server's own until the server holds it: they start once it does.
        children.wait_server(self.port, self.server)
        if self.kind != "sqlite":
            self.workers = [
                children.worker(f"worker-{index}", self.settings, wait=False) for index in range(2)
            ]
        for index, worker in enumerate(self.workers):
            children.wait_worker(f"worker-{index}", worker)
        with httpx.Client(base_url=self.base_url, headers=AUTH) as client:
            answer = client.post(
                "/admin/partners", json={"name": "drill-admin", "url": self.receiver.url("/admin")}
            )
            answer.raise_for_status()
            self.secrets["/admin"] = answer.json()["secret"]

    def publish_and_kill(
        self, events: list[dict[str, Any]], deadline: float
    ) -> tuple[Publisher, CliPublisher]:
        """Publish (CLI and admin API at once) while killing at seeded points of the publishing."""
        publisher = Publisher(self.base_url, events[CLI_EVENTS:], self.plan.publish_over, deadline)
        by_cli = CliPublisher(self.children, self.settings, events[:CLI_EVENTS])
        self.publishers = publisher, by_cli
        receiver, rng = self.receiver, random.Random(self.plan.seed)
        progress = 0  # deliveries accepted when the last kill began
        target = 0
        with publisher, by_cli:
            for number in range(1, self.plan.kills + 1):
                # Each kill lands while events are still to be published (the publisher waits at
                # the target until the restart is done) and after a delivery since the last kill,
                # so deliveries are in flight when it does.
                share = (number - 0.5 + rng.uniform(-0.3, 0.3)) / self.plan.kills
                target = min(len(publisher.events) - 1, max(target + 1, int(len(publisher.events) * share)))
                publisher.allow(target)
                if not publisher.wait_published(target, deadline - time.monotonic()):
                    raise DrillDeadline(
                        publisher.error or f"{len(publisher.published)} published by kill {number}"
                    )
                if not receiver.wait_accepted(progress + 1, deadline - time.monotonic()):
                    raise DrillDeadline(f"nothing delivered since kill {number - 1}")
                progress = len(receiver.accepted)
                state = f"{len(publisher.published)} published, {progress}/{self.expected} accepted"
                victims = self.kill(number)
                self.report.say(f"SIGKILL {number}/{self.plan.kills} to {victims} ({state}); restarted")
            publisher.allow(len(publisher.events))
            publisher.join(deadline - time.monotonic())
        if publisher.error or by_cli.error:
            raise DrillDeadline(publisher.error or by_cli.error or "")
        return publisher, by_cli

    def settle(self, deadline: float) -> None:
        """Until every delivery is accepted and the outbox says delivered; requeue any failed."""
        while True:
            if not self.receiver.wait_accepted(self.expected, deadline - time.monotonic()):
                raise DrillDeadline(
                    f"{len(self.receiver.accepted)} of {self.expected} (partner, event) accepted"
                )
            self.report.say(f"all {self.expected} deliveries accepted; waiting for the outbox to settle")
            states = _wait_settled(self.url, self.expected, deadline - time.monotonic())
            if states["delivered"] == self.expected:
                self.report.say(f"outbox settled: {dict(states)}")
                return
            if not states["failed"]:
                raise DrillDeadline(f"the outbox did not settle: {dict(states)}")
            # The schedule ran out for some: the operator's requeue, as documented.
            for partner in self.children.cli(self.settings, "partners", "list")["partners"]:
                answer = self.children.cli(self.settings, "partners", "retry", partner["id"])
                self.admin_retries += answer["requeued"]
            self.report.say(f"requeued {self.admin_retries} failed deliveries with `partners retry`")

    def stop(self) -> None:
        for process in [self.server, *self.workers]:
            if process is not None:
                self.children.stop(process)


def run(kind: str, workdir: Path, plan: Plan, postgres: str | None = None) -> Report:
    """The drill on one database (``kind`` is sqlite or postgresql)."""
    if kind == "postgresql" and not postgres:
        return skipped(DRILL, kind, stores.NO_POSTGRES)
    report = Report(DRILL, kind)
    deadline = time.monotonic() + plan.deadline
    events = _events(plan.events)
    with (
        stores.database(kind, workdir, postgres) as url,
        FlakyReceiver(plan) as receiver,
        Children(workdir / f"logs-delivery-{kind}") as children,
    ):
        drill = Drill(kind, plan, report, url, receiver, children)
        try:
            drill.start()
            report.say("server, workers and partners ready; publishing")
            drill.publish_and_kill(events, deadline)
            drill.settle(deadline)
            drill.stop()
        except (DrillDeadline, RuntimeError, httpx.HTTPError) as error:
            report.problems.append(f"deadline of {plan.deadline:.0f} s or a failed step: {error}")
        publisher, by_cli = drill.publishers or (None, None)
        published = (by_cli.published if by_cli else []) + (publisher.published if publisher else [])
        repeated = publisher.repeated if publisher else 0
        states = stores.delivery_states(url)
        outcomes = stores.attempt_outcomes(url)
        logged = stores.logged_attempts(url)
    _check(report, plan, receiver, drill.secrets, published, states, logged, drill.kills)
    answers = Counter(receiver.answers)
    per_delivery = Counter(request.headers.get(DELIVERY_HEADER, "") for request in receiver.requests)
    cli = min(CLI_EVENTS, len(published))
    report.numbers.update(
        {
            "events published (CLI + admin API)": f"{len(published)} ({cli} + {len(published) - cli})",
            "partners (CLI + admin API)": len(drill.secrets),
            "deliveries": drill.expected,
            "arrivals at the receiver": len(receiver.requests),
            "answered 200 / 500 / dropped / hung": (
                f"{answers[OK]} / {answers[ERROR]} / {answers[DROP]} / {answers[HANG]}"
            ),
            "retries (arrivals after a failed answer)": _retries(receiver),
            "duplicates (arrivals after a 200)": answers[OK] - len(receiver.accepted),
            "most arrivals of one delivery": max(per_delivery.values(), default=0),
            "logged attempts": sum(len(numbers) for numbers in logged.values()),
            "attempts logged by outcome": dict(sorted(outcomes.items())),
            "deliveries by state": dict(sorted(states.items())),
            "SIGKILLs / restarts": f"{drill.kills} / {drill.restarts}",
            "events whose publish was repeated (server down)": repeated,
            "failed deliveries requeued by an admin retry": drill.admin_retries,
        }
    )
    report.check(
        drill.kills >= plan.kills,
        f"delivery processes were SIGKILLed {drill.kills} times mid-run and restarted",
    )
    return report.finish()


def _retries(receiver: FlakyReceiver) -> int:
    failed: set[str] = set()
    retries = 0
    for request, answer in zip(receiver.requests, receiver.answers, strict=True):
        delivery = request.headers.get(DELIVERY_HEADER, "")
        if delivery in failed:
            retries += 1
        if answer != OK:
            failed.add(delivery)
    return retries


def _check(
    report: Report,
    plan: Plan,
    receiver: FlakyReceiver,
    secrets: dict[str, str],
    published: list[str],
    states: Counter[str],
    logged: dict[str, list[int]],
    kills: int,
) -> None:
    expected = {(path, event_id) for path in secrets for event_id in published}
    first_body: dict[str, bytes] = {}
    delivery_ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    bad_signatures: list[str] = []
    changed_bodies: list[str] = []
    wrong_kind: list[str] = []
    for request in receiver.requests:
        event_id = _event_id(request.body)
        try:
            verify(request.headers, request.body, secrets[request.path])
        except (SignatureError, KeyError) as error:
            bad_signatures.append(f"{request.path} {event_id}: {error!r}")
        if first_body.setdefault(event_id, request.body) != request.body:
            changed_bodies.append(event_id)
        delivery_ids[(request.path, event_id)].add(request.headers.get(DELIVERY_HEADER, ""))
        try:
            if json.loads(request.body)["event"] != request.headers.get(EVENT_HEADER):
                wrong_kind.append(event_id)
        except (ValueError, KeyError, TypeError):
            wrong_kind.append(event_id)
    arrived = set(delivery_ids)
    never = sorted(expected - receiver.accepted)
    unexpected = sorted(arrived - expected)
    split = sorted(key for key, ids in delivery_ids.items() if len(ids) != 1)
    report.check(
        len(published) == plan.events,
        f"all {plan.events} events were published",
        f"only {len(published)} of {plan.events} events were published",
    )
    report.check(
        not never and bool(expected),
        f"every one of the {len(expected)} (partner, event) deliveries was accepted at least once",
        f"{len(never)} (partner, event) deliveries never accepted, e.g. {never[:3]}",
    )
    report.check(
        states.get("delivered", 0) == len(expected) and sum(states.values()) == len(expected),
        f"the outbox holds exactly {len(expected)} deliveries, all delivered",
        f"outbox states {dict(states)}, expected {len(expected)} delivered",
    )
    report.check(
        not bad_signatures,
        f"all {len(receiver.requests)} requests verify with signing.verify against their partner's secret",
        f"{len(bad_signatures)} requests fail verification, e.g. {bad_signatures[:3]}",
    )
    report.check(
        not changed_bodies,
        f"every arrival of each of the {len(first_body)} eventIds has the bytes of its first arrival",
        f"{len(changed_bodies)} arrivals differ from their eventId's first body, e.g. {changed_bodies[:3]}",
    )
    report.check(
        not split and not wrong_kind,
        "each delivery kept one x-service-delivery id, and x-service-event always named the body's event",
        f"delivery ids changed for {split[:3]}; x-service-event mismatched for {wrong_kind[:3]}",
    )
    report.check(
        not unexpected,
        "nothing arrived that was not published for that partner",
        f"unexpected arrivals: {unexpected[:3]}",
    )
    per_delivery = Counter(request.headers.get(DELIVERY_HEADER, "") for request in receiver.requests)
    # An attempt is logged after it is sent; one a SIGKILL cut off between the two is sent again
    # under the same number. So a delivery may arrive more often than it has log rows, by at most
    # one per kill: more would mean some claim was sent twice.
    unlogged = {d: arrivals - len(logged.get(d, [])) for d, arrivals in per_delivery.items()}
    oversent = sorted(d for d, extra in unlogged.items() if extra > kills)
    report.check(
        not oversent,
        f"no delivery arrived more often than its logged attempts plus one per kill "
        f"({sum(len(n) for n in logged.values())} attempts logged, {len(receiver.requests)} arrivals, "
        f"{sum(max(0, extra) for extra in unlogged.values())} cut off by the {kills} kills): "
        "no claim was ever sent twice",
        f"{len(oversent)} deliveries arrived more often than that, e.g. "
        f"{[(d, per_delivery[d], logged.get(d)) for d in oversent[:3]]}",
    )
    gaps = sorted(d for d, numbers in logged.items() if sorted(set(numbers)) != [*range(1, max(numbers) + 1)])
    report.check(
        not gaps,
        "every delivery's logged attempt numbers run 1, 2, 3... without a gap: a claim that died with "
        "its worker was sent again under its own number",
        f"{len(gaps)} deliveries skip attempt numbers, e.g. {[(d, logged[d]) for d in gaps[:3]]}",
    )
