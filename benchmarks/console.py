"""The operator console's pages under a large store: p50 and p95 answer time of every page.

Each size fills an emptied database with ``N`` registrations (spread over a year), ``N``
deliveries (over 90 days, one attempt each, a tenth of them failed; ``N / 10`` events; 20
partners), inserted in bulk and not timed; PostgreSQL is then analysed, as autovacuum would soon
do. ``python -m service serve --no-worker`` serves it on loopback; one signed-in client asks for
each page ``--samples`` times in turn (after two warm-up requests), on one kept-alive connection,
and the time to the whole answer is measured. Deep pages start from a key in the middle of their
listing, so a page far down costs what the first one does (keyset pagination, never OFFSET).

    python -m benchmarks.console [--rows 10000,1000000] [--samples 40]
                                 [--database-url postgresql://user@host/db]

The aim: every page's p95 under 200 ms at 10^6 rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import sys
import tempfile
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks import servers

TOKEN = "benchmark-admin-token-for-the-console-pages"  # noqa: S105 - a loopback benchmark server
CHUNK = 20_000  # rows per bulk insert
PARTNERS = 20
PAYLOAD = '{"event":"platform.milestone","milestone":"bench","value":1}'
TARGET_MS = 200.0
NOW = datetime.now(UTC).replace(microsecond=0)
YEAR = timedelta(days=365)
QUARTER = timedelta(days=90)


def _registration_time(i: int, rows: int) -> datetime:
    return NOW - YEAR * (i / rows)


def _delivery_time(i: int, rows: int) -> datetime:
    return NOW - QUARTER * (i / rows)


async def fill(database_url: str, rows: int) -> None:
    """Empty the database, then insert the rows in bulk."""
    from sqlalchemy import insert, text

    from service.db.engine import create_engine, migrate_async
    from service.db.tables import deliveries, delivery_attempts, events, metadata, partners, registrations

    await migrate_async(database_url)
    engine = create_engine(database_url)
    postgres = database_url.startswith("postgres")
    intents = ("claim", "member", "arcade")
    try:
        async with engine.begin() as conn:
            if postgres:
                names = ", ".join(table.name for table in metadata.sorted_tables)
                await conn.execute(text(f"TRUNCATE {names}"))
            else:
                for table in reversed(metadata.sorted_tables):
                    await conn.execute(table.delete())
            await conn.execute(
                insert(partners),
                [
                    {"id": f"ptn_bench_{n:02d}", "name": f"Partner {n}", "url": f"https://partner{n}.example/hook",
                     "status": "active", "created_at": NOW - YEAR, "updated_at": NOW - YEAR}
                    for n in range(PARTNERS)
                ],
            )  # fmt: skip
        for start in range(0, rows, CHUNK):
            numbers = range(start, min(rows, start + CHUNK))
            registration_rows = []
            for i in numbers:
                moment = _registration_time(i, rows)
                registration_rows.append({
                    "email": f"user{i}@example.com", "email_key": f"user{i}@example.com",
                    "intent": intents[i % 3], "project": f"Project {i % 5000}",
                    "message": "Looking forward to the launch.", "created_at": moment, "updated_at": moment,
                })  # fmt: skip
            event_rows, delivery_rows, attempt_rows = [], [], []
            for i in numbers:
                moment = _delivery_time(i, rows)
                event_id = f"evt_bench_{i // 10:07d}"
                if i % 10 == 0:
                    event_rows.append({"id": event_id, "kind": "platform.milestone", "dedupe_key": event_id,
                                       "payload": PAYLOAD,
                                       "occurred_at": moment, "created_at": moment})  # fmt: skip
                status = "failed" if i % 10 == 3 else "delivered"
                partner_id = f"ptn_bench_{i % PARTNERS:02d}"
                delivery_rows.append({"id": f"dlv_bench_{i:08d}", "event_id": event_id,
                                      "partner_id": partner_id, "status": status, "attempts": 1,
                                      "next_attempt_at": moment,
                                      "created_at": moment, "updated_at": moment,
                                      "delivered_at": moment if status == "delivered" else None})  # fmt: skip
                attempt_rows.append({"delivery_id": f"dlv_bench_{i:08d}", "event_id": event_id,
                                     "event": "platform.milestone", "partner_id": partner_id, "attempt": 1,
                                     "started_at": moment, "duration_ms": 40,
                                     "status_code": 200 if status == "delivered" else 500,
                                     "error_class": None if status == "delivered" else "http_500",
                                     "response_excerpt": "ok" if status == "delivered" else "server error",
                                     "outcome": status})  # fmt: skip
            async with engine.begin() as conn:
                await conn.execute(insert(registrations), registration_rows)
                if event_rows:
                    await conn.execute(insert(events), event_rows)
                await conn.execute(insert(deliveries), delivery_rows)
                await conn.execute(insert(delivery_attempts), attempt_rows)
        if postgres:
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE"))
    finally:
        await engine.dispose()


def pages(rows: int) -> list[tuple[str, str]]:
    """(label, path) of every page measured."""
    from service.db.summaries import Key

    middle = rows // 2
    delivery_key = Key(_delivery_time(middle, rows), f"dlv_bench_{middle:08d}").token()
    registration_key = Key(_registration_time(middle, rows), str(middle + 1)).token()
    quote = urllib.parse.quote
    return [
        ("overview", "/console"),
        ("partners", "/console/partners"),
        ("partner", "/console/partners/ptn_bench_03"),
        ("deliveries", "/console/deliveries"),
        ("deliveries, deep page", f"/console/deliveries?after={quote(delivery_key)}"),
        ("deliveries of a partner", "/console/deliveries?partner=ptn_bench_03"),
        ("deliveries failed", "/console/deliveries?status=failed"),
        ("deliveries cancelled (none are)", "/console/deliveries?status=cancelled"),
        ("delivery", f"/console/deliveries/dlv_bench_{middle:08d}"),
        ("publish", "/console/events/new"),
        ("waitlist", "/console/waitlist"),
        ("waitlist, deep page", f"/console/waitlist?after={quote(registration_key)}"),
        ("waitlist of an intent", "/console/waitlist?intent=arcade"),
        ("waitlist search", "/console/waitlist?q=user12"),
        ("waitlist search, no match", "/console/waitlist?q=nobody"),
    ]


def sign_in(connection: http.client.HTTPConnection, base: str) -> str:
    body = urllib.parse.urlencode({"token": TOKEN, "next": "/console"})
    connection.request(
        "POST", "/console/login", body,
        {"content-type": "application/x-www-form-urlencoded", "origin": base},
    )  # fmt: skip
    response = connection.getresponse()
    response.read()
    cookie = response.getheader("set-cookie") or ""
    if response.status != 303 or "console_session=" not in cookie:
        raise RuntimeError(f"sign-in failed: {response.status}")
    return cookie.split(";", 1)[0]


def measure(connection: http.client.HTTPConnection, cookie: str, path: str, samples: int) -> list[float]:
    times = []
    for n in range(samples + 2):
        started = time.perf_counter()
        connection.request("GET", path, headers={"cookie": cookie})
        response = connection.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}")
        if n >= 2:
            times.append(elapsed)
    return times


def run_size(database_url: str, rows: int, samples: int) -> list[tuple[str, float, float]]:
    started = time.perf_counter()
    asyncio.run(fill(database_url, rows))
    print(f"  {rows:,} rows each inserted in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    port = servers.free_port()
    base = f"http://{servers.HOST}:{port}"
    results = []
    with servers.service(port, database_url, env={"SERVICE_ADMIN_TOKEN": TOKEN}):
        connection = http.client.HTTPConnection(servers.HOST, port, timeout=60)
        cookie = sign_in(connection, base)
        for label, path in pages(rows):
            times = measure(connection, cookie, path, samples)
            cuts = statistics.quantiles(times, n=20, method="inclusive")
            results.append((label, statistics.median(times), cuts[18]))
        connection.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.console", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", default="10000", help="comma-separated sizes (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=40, help="requests per page (default: %(default)s)")
    parser.add_argument(
        "--database-url", help="PostgreSQL to use (its tables are emptied); default: a SQLite file"
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.rows.split(",")]
    backend = "PostgreSQL" if args.database_url else "SQLite"
    worst = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for rows in sizes:
            url = args.database_url or f"sqlite:///{Path(scratch) / f'console-{rows}.db'}"
            results = run_size(url, rows, args.samples)
            print(f"\n{backend}, {rows:,} registrations and deliveries, {args.samples} requests a page:")
            print()
            print("| page | p50 ms | p95 ms |")
            print("|---|---:|---:|")
            for label, p50, p95 in results:
                print(f"| {label} | {p50:.1f} | {p95:.1f} |")
                worst = max(worst, p95)
    verdict = "PASS" if worst < TARGET_MS else "ABOVE TARGET"
    print(f"\nworst p95 {worst:.1f} ms (aim: under {TARGET_MS:.0f} ms)\n{verdict}")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
