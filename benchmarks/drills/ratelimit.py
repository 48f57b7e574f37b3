"""Drill 4, one rate limit across two server processes: Redis holds the count, not the process.

Two separate ``serve`` processes on different ports share a Redis (``SERVICE_RATE_LIMIT_STORAGE``)
under a key prefix of this run's own, and one SQLite file. One client address sends registrations
to both, alternately and concurrently, well past ``SERVICE_WAITLIST_RATE_LIMIT`` (20/minute) in
under a second. Exactly 20 are accepted in total, whichever process took them, and every other
answer is 429 with a ``Retry-After`` of whole seconds and the error shape; the database holds
exactly the 20. The Redis keys are deleted afterwards.

The limiter is a sliding-window counter. On Redis a client's window begins with its first hit
(limits' script creates the counter then, for two windows), not at a minute's edge, and the key
prefix is this run's own: a burst of under a minute is counted in one window, so "exactly the
limit" is the right answer. The burst takes well under a second, and the drill says so if it took
a minute.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from benchmarks.drills import stores
from benchmarks.drills.children import Children
from benchmarks.drills.report import Report, skipped
from tests.processes import free_port

DRILL = "one rate limit across two processes"
BURST_LIMIT = 60.0  # seconds the burst may take for "exactly the limit" to be the right answer


@dataclass(frozen=True)
class Plan:
    limit: int = 20  # per minute
    requests: int = 200
    concurrency: int = 16


FULL = Plan()
SHORT = Plan(requests=60, concurrency=8)


@dataclass
class Answer:
    port: int
    status: int
    retry_after: str | None
    body: dict[str, object]


async def _burst(ports: list[int], plan: Plan) -> list[Answer]:
    numbers = itertools.count()
    answers: list[Answer] = []
    next_port = itertools.cycle(ports)  # alternate: request n goes to server n % 2

    async def client(session: aiohttp.ClientSession) -> None:
        while (number := next(numbers)) < plan.requests:
            port = next(next_port)
            body = {"email": f"limit{number}@example.com", "intent": "member"}
            async with session.post(f"http://127.0.0.1:{port}/api/waitlist", json=body) as response:
                document = json.loads(await response.read())
                answers.append(Answer(port, response.status, response.headers.get("Retry-After"), document))

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(plan.concurrency)))
    return answers


def _base(port: int) -> dict[str, str]:
    return {"SERVICE_BASE_URL": f"http://127.0.0.1:{port}"}


def _error_shape(body: dict[str, object]) -> bool:
    return body.get("ok") is False and isinstance(body.get("message"), str) and bool(body["message"])


def _retry_after_ok(value: str | None) -> bool:
    return value is not None and value.isascii() and value.isdigit() and 1 <= int(value) <= 60


def run(workdir: Path, plan: Plan, redis: str | None) -> Report:
    if not redis:
        return skipped(DRILL, "redis", stores.NO_REDIS)
    report = Report(DRILL, "redis")
    prefix = stores.redis_prefix()
    ports = [free_port(), free_port()]
    try:
        # Migrated here: two servers migrating one new file at once would race.
        with stores.database("sqlite", workdir) as database, Children(workdir / "logs-ratelimit") as children:
            settings = {
                "SERVICE_DATABASE_URL": database,
                "SERVICE_WAITLIST_RATE_LIMIT": f"{plan.limit}/minute",
                "SERVICE_RATE_LIMIT_STORAGE": redis,
                "SERVICE_RATE_LIMIT_KEY_PREFIX": prefix,
            }
            servers = [
                children.start_server(f"server-{port}", port, {**settings, **_base(port)}, "--no-worker")
                for port in ports
            ]
            for port, server in zip(ports, servers, strict=True):
                children.wait_server(port, server)
            started = time.monotonic()
            answers = asyncio.run(_burst(ports, plan))
            burst = time.monotonic() - started
            for server in servers:
                children.stop(server)
            keys = stores.count_redis_keys(redis, prefix)
            rows = stores.registration_count(database)
    finally:
        left = stores.drop_redis_keys(redis, prefix)
    remaining = stores.count_redis_keys(redis, prefix)

    statuses = Counter(answer.status for answer in answers)
    accepted = Counter(answer.port for answer in answers if answer.status == 200)
    limited = [answer for answer in answers if answer.status == 429]
    bad_retry = [answer.retry_after for answer in limited if not _retry_after_ok(answer.retry_after)]
    bad_shape = [answer.body for answer in limited if not _error_shape(answer.body)]
    waits = sorted(
        {int(answer.retry_after or 0) for answer in limited if _retry_after_ok(answer.retry_after)}
    )
    report.numbers.update(
        {
            "limit": f"{plan.limit}/minute, shared through Redis under {prefix}*",
            "requests (one client, alternating two servers)": len(answers),
            "burst took": f"{burst:.2f} s",
            "answers by status": dict(sorted(statuses.items())),
            "accepted per server": {f"port {port}": accepted[port] for port in ports},
            "Retry-After values on 429": f"{waits[0]}-{waits[-1]} s" if waits else "none",
            "rows stored": rows,
            "Redis keys under the prefix (then deleted)": f"{keys} (deleted {left}, {remaining} left)",
        }
    )
    report.check(burst < BURST_LIMIT, f"the burst took {burst:.2f} s, inside the window its first hit began")
    report.check(
        statuses[200] == plan.limit and rows == plan.limit,
        f"exactly {plan.limit} of {len(answers)} were accepted across both processes, and {rows} rows stored",
        f"{statuses[200]} accepted and {rows} stored across two processes, expected exactly {plan.limit}",
    )
    report.check(
        all(accepted[port] > 0 for port in ports),
        "both processes accepted some: one counter, not one per process",
        f"accepted per server {dict(accepted)}: one server took them all, so sharing is unproved",
    )
    report.check(
        len(limited) == len(answers) - plan.limit and not bad_retry and not bad_shape,
        f"all {len(limited)} others were 429 with Retry-After in whole seconds and the error shape",
        f"{len(limited)} 429s; bad Retry-After {bad_retry[:3]}; bad bodies {bad_shape[:2]}; {dict(statuses)}",
    )
    report.check(keys > 0 and remaining == 0, f"the {keys} Redis keys of this run were deleted afterwards")
    return report.finish()
