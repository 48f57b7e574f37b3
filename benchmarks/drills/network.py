"""Drill 6, a network that lies: a silent database link, a frozen database, Redis down.

One ``serve`` (delivering webhooks from its own process) reaches PostgreSQL and Redis through TCP
proxies in the drill (``tests.faultproxy``) while four clients register without pause, a publisher
sends an event a second to a partner on loopback, and a prober reads ``/readyz`` twice a second.
Three faults, one after the other, each followed by a heal and no restart:

1. silent link: the database proxy stops forwarding without closing anything, for good on the
   connections it had (a dead link, a failed-over host); then new connections work again;
2. frozen database: nothing moves on any connection (a stopped server); then everything carries on;
3. Redis down: every connection cut and new ones refused; then it accepts again.

What it proves: ``/readyz`` says 503 within 15 s of each fault and names the part; registrations
are answered (200 or 503) in bounded time all along, and answered 200 again within 30 s of each
heal; every registration answered 200 is stored; every event accepted (202) reaches the partner.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy.engine import make_url

from benchmarks.drills import stores
from benchmarks.drills.children import Children
from benchmarks.drills.report import Report, skipped
from tests.faultproxy import SilentProxy
from tests.processes import free_port
from tests.webhook_helpers import ADMIN_TOKEN, AUTH, Receiver, milestone

DRILL = "a network that lies"
READY_FALLS_WITHIN = 15.0
RESUMES_WITHIN = 30.0
ANSWER_WITHIN = 20.0  # no registration waits longer than this for its answer, whatever the fault
ATTEMPT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Plan:
    fault: float = 20.0  # seconds each fault lasts
    clients: int = 4
    pause: float = 0.05  # seconds between a client's registrations


FULL = Plan()
SHORT = Plan(fault=6.0, clients=2, pause=0.1)


@dataclass
class Log:
    """What the clients, the publisher and the prober saw, stamped with time.monotonic()."""

    # (sent, seconds to the answer, status, email)
    registrations: list[tuple[float, float, int, str]] = field(default_factory=list)
    ready: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    published: list[str] = field(default_factory=list)  # eventIds answered 202
    stop: bool = False


async def _register(session: aiohttp.ClientSession, base: str, log: Log, client: int, pause: float) -> None:
    number = 0
    while not log.stop:
        email = f"net{client}-{number}@example.com"
        number += 1
        sent = time.monotonic()
        try:
            body = {"email": email, "intent": "claim"}
            async with session.post(f"{base}/api/waitlist", json=body) as answer:
                status = answer.status
                await answer.read()
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        log.registrations.append((sent, time.monotonic() - sent, status, email))
        await asyncio.sleep(pause)


async def _probe(session: aiohttp.ClientSession, base: str, log: Log) -> None:
    while not log.stop:
        try:
            async with session.get(f"{base}/readyz") as answer:
                log.ready.append((time.monotonic(), answer.status, json.loads(await answer.read())))
        except (aiohttp.ClientError, TimeoutError):
            log.ready.append((time.monotonic(), 0, {}))
        await asyncio.sleep(0.5)


async def _publish(session: aiohttp.ClientSession, base: str, log: Log) -> None:
    number = 0
    while not log.stop:
        number += 1
        try:
            event = milestone(value=number)
            async with session.post(f"{base}/admin/events", json=event, headers=AUTH) as answer:
                if answer.status == 202:
                    log.published.append(json.loads(await answer.read())["eventId"])
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(1.0)


def _phase(report: Report, log: Log, name: str, began: float, healed: float, part: str) -> None:
    """Check and record what one fault did."""
    fell = next((at - began for at, status, body in log.ready if at >= began and status == 503), None)
    refusals = [body for at, status, body in log.ready if began <= at and status == 503]
    named = any(body.get(part) in ("down", "failing") for body in refusals)
    during = [entry for entry in log.registrations if began <= entry[0] < healed]
    back = _first_after(healed, [(sent, status) for sent, _, status, _ in log.registrations])
    ready_again = _first_after(healed, [(at, status) for at, status, _ in log.ready])
    report.numbers[f"{name}: /readyz 503 after (s)"] = None if fell is None else round(fell, 1)
    report.numbers[f"{name}: registrations answered 200 / 503 during it"] = (
        f"{sum(1 for entry in during if entry[2] == 200)} / {sum(1 for entry in during if entry[2] == 503)}"
    )
    report.numbers[f"{name}: first 200 after the heal (s)"] = None if back is None else round(back, 1)
    report.numbers[f"{name}: /readyz 200 after the heal (s)"] = (
        None if ready_again is None else round(ready_again, 1)
    )
    report.check(
        fell is not None and fell <= READY_FALLS_WITHIN and named,
        f"{name}: /readyz answered 503 naming {part} {fell and round(fell, 1)} s after the fault began",
    )
    report.check(
        back is not None and back <= RESUMES_WITHIN,
        f"{name}: registrations answered 200 again {back and round(back, 1)} s after the heal, no restart",
    )


def run(workdir: Path, plan: Plan, postgres: str | None, redis: str | None) -> Report:
    if postgres is None:
        return skipped(DRILL, "postgresql", stores.NO_POSTGRES)
    if redis is None:
        return skipped(DRILL, "postgresql", stores.NO_REDIS)
    report = Report(DRILL, "postgresql")
    redis_url = make_url(redis)
    prefix = stores.redis_prefix()
    try:
        with (
            stores.database("postgresql", workdir, postgres) as url,
            SilentProxy("127.0.0.1", make_url(url).port or 5432) as database,
            SilentProxy(redis_url.host or "127.0.0.1", redis_url.port or 6379) as limits,
            Receiver() as partner,
            Children(workdir / "logs") as children,
        ):
            port = free_port()
            settings = {
                "SERVICE_DATABASE_URL": _through(url, database),
                "SERVICE_RATE_LIMIT_STORAGE": f"redis://127.0.0.1:{limits.port}/{redis_url.database or 0}",
                "SERVICE_RATE_LIMIT_KEY_PREFIX": prefix,
                "SERVICE_WAITLIST_RATE_LIMIT": "100000/minute",
                "SERVICE_SECRETS_KEY": stores.SECRETS_KEY,
                "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
                "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
                "SERVICE_WEBHOOK_TIMEOUT": str(ATTEMPT_TIMEOUT),
                "SERVICE_WEBHOOK_RETRY_SCHEDULE": "1,1,1,2,2,2,5,5,5,5",
            }
            server = children.server("serve", port, settings)
            log = asyncio.run(_drive(report, f"http://127.0.0.1:{port}", plan, database, limits, partner))
            report.check(server.poll() is None, "the server ran through every fault without a restart")
            slowest = max(took for _, took, _, _ in log.registrations)
            statuses: dict[int, int] = {}
            for _, _, status, _ in log.registrations:
                statuses[status] = statuses.get(status, 0) + 1
            report.numbers["registrations by status"] = dict(sorted(statuses.items()))
            report.numbers["slowest answer (s)"] = round(slowest, 1)
            report.check(
                slowest <= ANSWER_WITHIN and 0 not in statuses,
                f"every registration was answered within {ANSWER_WITHIN:.0f} s (slowest {slowest:.1f} s)",
            )
            # Stored by their identity: the address trimmed and lower-cased (these are already).
            accepted = {email for _, _, status, email in log.registrations if status == 200}
            stored = {email for email, _ in stores.registered(url)}
            report.numbers["answered 200 but missing"] = len(accepted - stored)
            report.check(not accepted - stored, f"all {len(accepted)} registrations answered 200 are stored")
            delivered = partner.wait_for(
                lambda requests: set(log.published)
                <= {json.loads(request.body).get("eventId") for request in requests},
                timeout=RESUMES_WITHIN,
            )
            report.numbers["events accepted (202)"] = len(log.published)
            report.check(delivered, f"all {len(log.published)} events answered 202 reached the partner")
    finally:
        stores.drop_redis_keys(redis, prefix)
    return report.finish()


async def _drive(
    report: Report, base: str, plan: Plan, database: SilentProxy, limits: SilentProxy, partner: Receiver
) -> Log:
    log = Log()
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(
            f"{base}/admin/partners", json={"name": "Partner", "url": partner.url()}, headers=AUTH
        ) as answer:
            assert answer.status == 201, await answer.text()
        tasks = [
            *(asyncio.create_task(_register(session, base, log, n, plan.pause)) for n in range(plan.clients)),
            asyncio.create_task(_probe(session, base, log)),
            asyncio.create_task(_publish(session, base, log)),
        ]
        faults = [
            ("silent link", "database", database.silence, database.heal),
            ("frozen database", "database", database.freeze, database.thaw),
            ("Redis down", "rateLimitStore", limits.down, limits.up),
        ]
        await asyncio.sleep(2.0)  # a steady state first
        for name, part, fault, heal in faults:
            report.say(f"{name} for {plan.fault:.0f} s")
            began = time.monotonic()
            await asyncio.to_thread(fault)
            await asyncio.sleep(plan.fault)
            await asyncio.to_thread(heal)
            healed = time.monotonic()
            # Each fault is followed by a recovery before the next begins.
            await _until(lambda healed=healed: _resumed(log, healed), RESUMES_WITHIN)
            _phase(report, log, name, began, healed, part)
        log.stop = True
        await asyncio.gather(*tasks)
    return log


def _first_after(moment: float, seen: list[tuple[float, int]]) -> float | None:
    """Seconds from ``moment`` to the first 200 seen after it."""
    return next((at - moment for at, status in seen if at >= moment and status == 200), None)


def _resumed(log: Log, healed: float) -> bool:
    registered = _first_after(healed, [(sent, status) for sent, _, status, _ in log.registrations])
    ready = _first_after(healed, [(at, status) for at, status, _ in log.ready])
    return registered is not None and ready is not None


def _through(url: str, proxy: SilentProxy) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


async def _until(condition: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
