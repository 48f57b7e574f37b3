"""Drill 5, hostile partners: partners that hang, answer garbage, reset connections, reply with NUL
and control bytes or with a huge header, beside healthy ones, while delivery workers are SIGKILLed.

Each hostile partner is a raw TCP server on loopback doing one thing to every request:

- ``hang``: reads the request and never answers (the attempt times out);
- ``garbage``: answers bytes that are not HTTP, then closes;
- ``reset``: resets the connection (``SO_LINGER`` 0) as soon as it is accepted;
- ``nul``: a well-formed 503 whose body holds NUL, escape and other control bytes and invalid UTF-8;
- ``huge-header``: a 200 whose head carries a 100,000-byte header line.

Two healthy partners answer 200 at once (``tests.webhook_helpers.Receiver``). Events are published
through ``POST /admin/events`` while delivery runs; at seeded points the delivery processes are
SIGKILLed and restarted (SQLite: the server and its in-process worker; PostgreSQL: two
``python -m service worker`` processes beside ``serve --no-worker``, in turn, the last kill both).

What must hold: every event reaches every healthy partner and their deliveries end ``delivered``;
nothing is lost (the outbox holds one delivery per partner and event, none of a hostile partner's
``delivered``); every response excerpt stored is plain text (no NUL or control character), the
``nul`` partner's included; every hostile partner's circuit is open, the healthy ones' closed.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from benchmarks.drills import stores
from benchmarks.drills.children import Children, KillsDeliverers
from benchmarks.drills.delivery import Publisher, _event_id, _events
from benchmarks.drills.report import DrillDeadline, Report, skipped
from service.db.tables import deliveries, delivery_attempts, partners
from tests.processes import free_port
from tests.webhook_helpers import ADMIN_TOKEN, AUTH, Received, Receiver

DRILL = "hostile partners"
HOSTILE = ("hang", "garbage", "reset", "nul", "huge-header")
HEALTHY = ("/one", "/two")
NUL_BODY = b"drill \x00 nul \x1b[31m red \x07 bell \r\n \xff\xfe not utf-8 \x7f\x9b"
HUGE_HEADER = 100_000  # bytes in the one header line of the huge-header partner's answer
POLL = 0.1  # seconds between reads of the outbox while waiting for it
# Partner secrets are sealed at rest under this key where the service does so; every process shares it.
SECRETS_KEY = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="  # 32 bytes of 0x01


@dataclass(frozen=True)
class Plan:
    events: int = 200
    kills: int = 4
    publish_over: float = 10.0  # seconds: events trickle in while deliveries and kills happen
    timeout: float = 1.0  # SERVICE_WEBHOOK_TIMEOUT (and the connect timeout)
    schedule: str = "0.2,0.5,1,1,1,1,1,1"  # SERVICE_WEBHOOK_RETRY_SCHEDULE
    breaker_failures: int = 5  # SERVICE_WEBHOOK_BREAKER_FAILURES
    breaker_cooldown: float = 2.0  # SERVICE_WEBHOOK_BREAKER_COOLDOWN
    deadline: float = 180.0  # seconds for the whole drill on one database
    seed: int = 5


FULL = Plan()
SHORT = Plan(events=20, kills=2, publish_over=1.5, deadline=50.0)


class HostileServers:
    """The hostile partners: one raw TCP server per behaviour, on a loop of their own thread."""

    def __init__(self) -> None:
        self.ports: dict[str, int] = {}
        self.connections: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._held: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> HostileServers:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def url(self, behaviour: str) -> str:
        return f"http://127.0.0.1:{self.ports[behaviour]}/hook"

    async def _start(self) -> None:
        for behaviour in HOSTILE:

            async def handle(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, b: str = behaviour
            ) -> None:
                self.connections[b] += 1
                try:
                    await self._serve(b, reader, writer)
                except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    pass  # the sender gave up first: that is the point
                finally:
                    writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self._servers.append(server)
            self.ports[behaviour] = server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._held):
            writer.close()

    async def _serve(
        self, behaviour: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if behaviour == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return  # closing with linger 0 sends RST
        await reader.readuntil(b"\r\n\r\n")  # the request's head; its small body may follow unread
        if behaviour == "hang":
            self._held.add(writer)
            try:
                await reader.read()  # until the sender closes after its timeout
            finally:
                self._held.discard(writer)
            return
        if behaviour == "garbage":
            writer.write(b"\x16\x03\x01\x00\xff drill: this is not HTTP \x00\x01\x02\r\n\r\n")
        elif behaviour == "nul":
            length = f"Content-Length: {len(NUL_BODY)}\r\n".encode()
            head = b"HTTP/1.1 503 Service Unavailable\r\n" + length + b"Connection: close\r\n\r\n"
            writer.write(head + NUL_BODY)
        elif behaviour == "huge-header":
            writer.write(
                b"HTTP/1.1 200 OK\r\nX-Drill: " + b"h" * HUGE_HEADER + b"\r\nContent-Length: 2\r\n\r\nok"
            )
        await writer.drain()


def _accepted(requests: list[Received]) -> set[tuple[str, str]]:
    """(path, eventId) of what the healthy partners received (each answered 200 at once)."""
    return {(request.path, _event_id(request.body)) for request in requests if request.path in HEALTHY}


def _by_partner(url: str) -> dict[str, Counter[str]]:
    """Each partner's deliveries by state, keyed by the partner's name."""
    statement = (
        select(partners.c.name, deliveries.c.status, func.count())
        .join(partners, partners.c.id == deliveries.c.partner_id)
        .group_by(partners.c.name, deliveries.c.status)
    )
    found: dict[str, Counter[str]] = {}
    for name, status, count in asyncio.run(stores._rows(url, statement)):
        found.setdefault(name, Counter())[status] = count
    return found


def _circuits(url: str) -> dict[str, bool]:
    """Each partner's circuit, by name: True while open (or half-open, awaiting its probe)."""
    rows = asyncio.run(stores._rows(url, select(partners.c.name, partners.c.circuit_open_until)))
    return {name: until is not None for name, until in rows}


def _attempts(url: str) -> list[tuple[str, str | None, str | None]]:
    """Every logged attempt's partner name, error class and response excerpt."""
    statement = select(
        partners.c.name, delivery_attempts.c.error_class, delivery_attempts.c.response_excerpt
    ).join(partners, partners.c.id == delivery_attempts.c.partner_id)
    return [tuple(row) for row in asyncio.run(stores._rows(url, statement))]


def _plain(text: str) -> bool:
    return not any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in text)


class Drill(KillsDeliverers):
    def __init__(self, kind: str, plan: Plan, report: Report, url: str, children: Children) -> None:
        self.kind, self.plan, self.report, self.url, self.children = kind, plan, report, url, children
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.settings = {
            "SERVICE_DATABASE_URL": url,
            "SERVICE_BASE_URL": self.base_url,
            "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
            "SERVICE_SECRETS_KEY": SECRETS_KEY,
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
            "SERVICE_WEBHOOK_TIMEOUT": str(plan.timeout),
            "SERVICE_WEBHOOK_CONNECT_TIMEOUT": str(plan.timeout),
            "SERVICE_WEBHOOK_RETRY_SCHEDULE": plan.schedule,
            "SERVICE_WEBHOOK_BREAKER_FAILURES": str(plan.breaker_failures),
            "SERVICE_WEBHOOK_BREAKER_COOLDOWN": str(plan.breaker_cooldown),
        }
        self.server_args = () if kind == "sqlite" else ("--no-worker",)
        self.server = None
        self.workers = []
        self.kills = self.restarts = 0

    def start(self, targets: dict[str, str]) -> None:
        self.server = self.children.start_server("server", self.port, self.settings, *self.server_args)
        # The workers' probe ports are the kernel's pick, which could be the server's own until it
        # holds it: they start once it does.
        self.children.wait_server(self.port, self.server)
        if self.kind != "sqlite":
            self.workers = [self.children.worker(f"worker-{n}", self.settings, wait=False) for n in range(2)]
        for number, worker in enumerate(self.workers):
            self.children.wait_worker(f"worker-{number}", worker)
        with httpx.Client(base_url=self.base_url, headers=AUTH) as client:
            for name, url in targets.items():
                client.post("/admin/partners", json={"name": name, "url": url}).raise_for_status()

    def publish_and_kill(
        self, events: list[dict[str, Any]], receiver: Receiver, deadline: float
    ) -> list[str]:
        publisher = Publisher(self.base_url, events, self.plan.publish_over, deadline)
        rng = random.Random(self.plan.seed)
        progress = 0
        everything = len(events) * len(HEALTHY)  # all delivered already: kill all the same
        target = 0
        with publisher:
            for number in range(1, self.plan.kills + 1):
                share = (number - 0.5 + rng.uniform(-0.3, 0.3)) / self.plan.kills
                target = min(len(events) - 1, max(target + 1, int(len(events) * share)))
                publisher.allow(target)  # it waits there until the restart is done
                if not publisher.wait_published(target, deadline - time.monotonic()):
                    raise DrillDeadline(
                        publisher.error or f"{len(publisher.published)} published by kill {number}"
                    )
                # A delivery to a healthy partner since the last restart: delivery is running (the
                # hanging partner's attempts are in flight whatever happens).
                if not receiver.wait_for(
                    lambda got, seen=progress: (
                        len(_accepted(got)) > seen or len(_accepted(got)) >= everything
                    ),
                    deadline - time.monotonic(),
                ):
                    raise DrillDeadline(f"nothing reached a healthy partner after restart {number - 1}")
                victims = self.kill(number)
                self.report.say(
                    f"SIGKILL {number}/{self.plan.kills} to {victims} ({len(publisher.published)} published, "
                    f"{len(_accepted(list(receiver.requests)))} healthy deliveries accepted); restarted"
                )
                progress = len(_accepted(list(receiver.requests)))
            publisher.allow(len(events))
            publisher.join(deadline - time.monotonic())
        if publisher.error:
            raise DrillDeadline(publisher.error)
        return publisher.published

    def settle(self, receiver: Receiver, expected: int, deadline: float) -> None:
        """Until the healthy partners have everything, delivered, and every hostile circuit is open."""
        if not receiver.wait_for(lambda got: len(_accepted(got)) >= expected, deadline - time.monotonic()):
            raise DrillDeadline(
                f"{len(_accepted(list(receiver.requests)))} of {expected} healthy deliveries arrived"
            )
        self.report.say(f"all {expected} healthy deliveries arrived; waiting for the outbox and the circuits")
        while True:
            states = _by_partner(self.url)
            delivered = sum(states.get(name, Counter())["delivered"] for name in HEALTHY)
            circuits = _circuits(self.url)
            if delivered >= expected and all(circuits.get(name) for name in HOSTILE):
                return
            if time.monotonic() > deadline:
                raise DrillDeadline(f"healthy delivered {delivered} of {expected}; circuits {circuits}")
            time.sleep(POLL)  # reading other processes' progress; the deadline bounds it

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
    published: list[str] = []
    with (
        stores.database(kind, workdir, postgres) as url,
        HostileServers() as hostile,
        Receiver() as receiver,
        Children(workdir / f"logs-partners-{kind}") as children,
    ):
        drill = Drill(kind, plan, report, url, children)
        targets = {
            **{name: hostile.url(name) for name in HOSTILE},
            **{path: receiver.url(path) for path in HEALTHY},
        }
        try:
            drill.start(targets)
            report.say(f"{len(HOSTILE)} hostile and {len(HEALTHY)} healthy partners ready; publishing")
            published = drill.publish_and_kill(events, receiver, deadline)
            drill.settle(receiver, len(published) * len(HEALTHY), deadline)
            drill.stop()
        except (DrillDeadline, RuntimeError, httpx.HTTPError) as error:
            report.problems.append(f"deadline of {plan.deadline:.0f} s or a failed step: {error}")
        states = _by_partner(url)
        circuits = _circuits(url)
        attempts = _attempts(url)
        connections = dict(hostile.connections)
        accepted = _accepted(list(receiver.requests))
    _check(report, plan, published, accepted, states, circuits, attempts, drill.kills)
    errors: dict[str, Counter[str]] = {}
    for name, error_class, _ in attempts:
        errors.setdefault(name, Counter())[str(error_class)] += 1
    report.numbers.update(
        {
            "events published": len(published),
            "partners (hostile + healthy)": f"{len(HOSTILE)} + {len(HEALTHY)}",
            "connections to each hostile partner": connections,
            "attempts by partner and error class": {
                name: dict(found) for name, found in sorted(errors.items())
            },
            "deliveries by partner and state": {name: dict(found) for name, found in sorted(states.items())},
            "SIGKILLs / restarts": f"{drill.kills} / {drill.restarts}",
            # Under load a healthy partner's answer can outlast the drill's short timeout: retried.
            "failed attempts to healthy partners": sum(
                1 for name, error_class, _ in attempts if name in HEALTHY and error_class is not None
            ),
        }
    )
    report.check(
        drill.kills >= plan.kills, f"delivery processes were SIGKILLed {drill.kills} times and restarted"
    )
    return report.finish()


def _check(
    report: Report,
    plan: Plan,
    published: list[str],
    accepted: set[tuple[str, str]],
    states: dict[str, Counter[str]],
    circuits: dict[str, bool],
    attempts: list[tuple[str, str | None, str | None]],
    kills: int,
) -> None:
    expected = {(path, event_id) for path in HEALTHY for event_id in published}
    report.check(
        len(published) == plan.events,
        f"all {plan.events} events were published",
        f"only {len(published)} of {plan.events} events were published",
    )
    missing = sorted(expected - accepted)
    report.check(
        bool(expected) and not missing,
        f"every one of the {len(expected)} (healthy partner, event) deliveries arrived",
        f"{len(missing)} healthy deliveries never arrived, e.g. {missing[:3]}",
    )
    healthy_done = all(
        states.get(name, Counter()) == Counter({"delivered": len(published)}) for name in HEALTHY
    )
    report.check(
        healthy_done,
        f"both healthy partners' {len(published)} deliveries each are delivered",
        f"healthy partners' deliveries by state: {[dict(states.get(name, {})) for name in HEALTHY]}",
    )
    whole = all(sum(states.get(name, Counter()).values()) == len(published) for name in (*HOSTILE, *HEALTHY))
    none_delivered = all(not states.get(name, Counter())["delivered"] for name in HOSTILE)
    report.check(
        whole and none_delivered,
        f"nothing lost: the outbox holds one delivery per partner and event ({len(published)} each), "
        "none of a hostile partner's delivered",
        f"deliveries by partner and state: { {name: dict(found) for name, found in states.items()} }",
    )
    excerpts = [excerpt for _, _, excerpt in attempts if excerpt is not None]
    nul = [excerpt for name, _, excerpt in attempts if name == "nul" and excerpt is not None]
    report.check(
        all(_plain(excerpt) for excerpt in excerpts)
        and bool(nul)
        and all("\ufffd" in excerpt for excerpt in nul),
        f"all {len(excerpts)} stored excerpts are plain text, the nul partner's {len(nul)} included "
        "(its NUL and control bytes stored as U+FFFD)",
        f"excerpts with control characters: {[e for e in excerpts if not _plain(e)][:3]}; "
        f"the nul partner's: {nul[:2]}",
    )
    report.check(
        all(circuits.get(name) for name in HOSTILE) and not any(circuits.get(name) for name in HEALTHY),
        f"every hostile partner's circuit is open ({', '.join(HOSTILE)}), both healthy ones closed",
        f"circuits (True: open): {circuits}",
    )
