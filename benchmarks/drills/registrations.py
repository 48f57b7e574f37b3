"""Drill 1, no lost registrations: a server killed with SIGKILL under load loses nothing it answered.

``python -m service serve --no-worker`` takes registrations from several concurrent clients (JSON
and form bodies, every intent, some repeats of earlier registrations). At a seeded point in each
round the whole process group gets SIGKILL (no shutdown hook, no flush); the server is restarted on
the same port and the clients carry on. After the last round every (email, intent) that was answered
200 must be in the database, each exactly once. Registrations committed whose answer the kill cut
off are allowed (the client never heard 200), and counted.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from benchmarks.drills import stores
from benchmarks.drills.children import Children
from benchmarks.drills.report import DrillDeadline, Report, skipped
from tests.processes import free_port

DRILL = "no lost registrations"
INTENTS = ("claim", "member", "arcade")
REPEAT_SHARE = 0.1  # of requests: an earlier answered registration again, with a new project
REQUEST_TIMEOUT = 10.0  # seconds per request; a request cut off by a kill fails much sooner


@dataclass(frozen=True)
class Plan:
    kills: int = 5
    answers_per_round: int = 500  # a kill lands after 0.5-1.5 times this many new 200s
    clients: int = 24
    workers: int = 2  # server processes (Sanic workers) under one manager
    deadline: float = 180.0  # seconds for the whole drill on one database
    seed: int = 1


FULL = Plan()
SHORT = Plan(kills=2, answers_per_round=120, clients=12, workers=1, deadline=45.0)


class Load:
    """Clients registering on a background thread until stopped, noting every 200."""

    def __init__(self, port: int, clients: int, seed: int) -> None:
        self.url = f"http://127.0.0.1:{port}/api/waitlist"
        self.clients = clients
        self.rng = random.Random(seed)
        self.answered: set[tuple[str, str]] = set()
        self._answered_order: list[tuple[str, str]] = []  # for a seeded choice of a repeat
        self.answers = 0  # 200s, repeats included
        self.statuses: Counter[int] = Counter()
        self.refused = 0  # no connection: the server was down
        self.cut = 0  # connected, then no answer: cut off by a kill
        self.repeats = 0  # repeats of an earlier registration answered 200
        self._numbers = itertools.count()
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(REQUEST_TIMEOUT + 5)

    def wait_answers(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.answers < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def _next(self) -> tuple[str, str, dict[str, str]]:
        with self._changed:
            if self.answered and self.rng.random() < REPEAT_SHARE:
                email, intent = self.rng.choice(self._answered_order)
                return email, intent, {"project": "a repeat"}
            number = next(self._numbers)
        return f"drill{number}@example.com", INTENTS[number % len(INTENTS)], {}

    async def _client(self, session: aiohttp.ClientSession, index: int) -> None:
        while not self._stop.is_set():
            email, intent, extra = self._next()
            body = {"email": email, "intent": intent, **extra}
            # Half the clients send JSON, half URL-encoded forms: both paths must be durable.
            options = {"json": body} if index % 2 else {"data": body}
            try:
                async with session.post(self.url, **options) as response:  # type: ignore[arg-type]
                    await response.read()
                    with self._changed:
                        self.statuses[response.status] += 1
                        if response.status == 200:
                            if extra:
                                self.repeats += 1
                            elif (email, intent) not in self.answered:
                                self.answered.add((email, intent))
                                self._answered_order.append((email, intent))
                            self.answers += 1
                            self._changed.notify_all()
            except aiohttp.ClientConnectorError:
                with self._changed:
                    self.refused += 1
                await asyncio.sleep(0.02)  # the server is restarting; try again shortly
            except (TimeoutError, aiohttp.ClientError):
                with self._changed:
                    self.cut += 1

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        connector = aiohttp.TCPConnector(limit=self.clients)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(*(self._client(session, index) for index in range(self.clients)))


def run(kind: str, workdir: Path, plan: Plan, postgres: str | None = None) -> Report:
    """The drill on one database (``kind`` is sqlite or postgresql)."""
    if kind == "postgresql" and not postgres:
        return skipped(DRILL, kind, stores.NO_POSTGRES)
    report = Report(DRILL, kind)
    deadline = time.monotonic() + plan.deadline
    rng = random.Random(plan.seed)
    port = free_port()
    with (
        stores.database(kind, workdir, postgres) as url,
        Children(workdir / f"logs-registrations-{kind}") as children,
    ):
        settings = {
            "SERVICE_DATABASE_URL": url,
            "SERVICE_BASE_URL": f"http://127.0.0.1:{port}",
            "SERVICE_WAITLIST_RATE_LIMIT": "100000000/minute",  # one client address, many requests
            "SERVICE_SECRETS_KEY": stores.SECRETS_KEY,  # serve on PostgreSQL does not start without one
        }
        args = ("--no-worker", "--workers", str(plan.workers))
        server = children.server("server", port, settings, *args)
        kills = 0
        with Load(port, plan.clients, plan.seed) as load:
            try:
                low, high = plan.answers_per_round // 2, plan.answers_per_round * 3 // 2
                for _ in range(plan.kills):
                    target = load.answers + rng.randint(low, high)
                    if not load.wait_answers(target, deadline - time.monotonic()):
                        raise DrillDeadline(f"only {load.answers} answers before the deadline")
                    children.kill(server)
                    kills += 1
                    report.say(f"SIGKILL {kills}/{plan.kills} after {load.answers} answers; restarting")
                    server = children.server("server", port, settings, *args)
                # The restarted server serves again before the load stops.
                if not load.wait_answers(load.answers + low, deadline - time.monotonic()):
                    raise DrillDeadline(f"the last restart answered nothing ({load.answers} answers)")
            except DrillDeadline as error:
                report.problems.append(f"deadline of {plan.deadline:.0f} s: {error}")
        children.stop(server)
        stored = stores.registered(url)

    answered = load.answered
    missing = sorted(pair for pair in answered if pair not in stored)
    doubled = sorted(pair for pair, count in stored.items() if count > 1)
    unanswered = len(set(stored) - answered)
    report.numbers.update(
        {
            "server processes": plan.workers,
            "clients": plan.clients,
            "SIGKILLs": kills,
            "200 answers": load.answers,
            "registrations answered 200": len(answered),
            "repeats answered 200": load.repeats,
            "other statuses": dict(sorted((s, n) for s, n in load.statuses.items() if s != 200)),
            "requests cut off by a kill": load.cut,
            "connections refused while down": load.refused,
            "rows stored": sum(stored.values()),
            "stored, answer cut off (allowed)": unanswered,
            "answered 200 but missing": len(missing),
        }
    )
    report.check(kills == plan.kills, f"the server was SIGKILLed {kills} times mid-load and restarted")
    report.check(
        not missing,
        f"all {len(answered)} registrations answered 200 are in the database",
        f"{len(missing)} registrations answered 200 are missing, e.g. {missing[:3]}",
    )
    report.check(
        not doubled,
        f"each of the {len(stored)} stored (email, intent) pairs is one row, repeats included",
        f"{len(doubled)} (email, intent) pairs have more than one row, e.g. {doubled[:3]}",
    )
    report.check(
        set(load.statuses) <= {200},
        "every answer was 200 (no 4xx/5xx under load or after a restart)",
        f"unexpected statuses under load: {dict(load.statuses)}",
    )
    return report.finish()
