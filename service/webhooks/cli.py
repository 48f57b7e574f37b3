"""``python -m service partners|events|worker``: the operator's webhook commands.

They call the same functions as the admin routes. Answers are JSON on stdout; errors are the
service's JSON error shape on stderr with exit status 1. A new or rotated secret is printed once,
in the answer, and nowhere else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from service.settings import Settings

Command = Callable[[argparse.Namespace, Settings], int]


def _now() -> datetime:
    return datetime.now(UTC)


def _print(document: Any, out: TextIO | None = None) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2), file=out or sys.stdout)


def _run(settings: Settings, work: Callable[[Any], Awaitable[Any]]) -> int:
    """Migrate, open an engine, run ``work(engine)``, print its answer or the error."""
    from service.db.engine import create_engine, migrate
    from service.errors import ServiceError

    migrate(settings.database_url)

    async def main() -> Any:
        engine = create_engine(settings.database_url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    try:
        answer = asyncio.run(main())
    except ServiceError as error:
        _print(error.body(), sys.stderr)
        return 1
    _print(answer)
    return 0


def _unknown(partner_id: str) -> Exception:
    from service.errors import NotFound

    return NotFound(f"No partner has the id {json.dumps(partner_id)}.")


# --- partners ---------------------------------------------------------------------------------


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    from service.webhooks import partners

    data: dict[str, Any] = {"name": args.name, "url": args.url}
    if args.events is not None:
        data["events"] = [kind.strip() for kind in args.events.split(",") if kind.strip()]

    async def work(engine: Any) -> Any:
        new = partners.validate_new_partner(data)
        await partners.check_destination(new.url, allow_private=settings.webhook_allow_private_urls)
        async with engine.begin() as conn:
            partner = await partners.create_partner(conn, new, now=_now())
        return {**partner.public(), "secret": partner.secret}

    return _run(settings, work)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    from service.webhooks import partners

    async def work(engine: Any) -> Any:
        async with engine.connect() as conn:
            return {"partners": [partner.public() for partner in await partners.list_partners(conn)]}

    return _run(settings, work)


def _status_command(status: str) -> Command:
    def command(args: argparse.Namespace, settings: Settings) -> int:
        from service.webhooks import partners

        async def work(engine: Any) -> Any:
            async with engine.begin() as conn:
                partner = await partners.set_status(conn, args.id, status, now=_now())
            if partner is None:
                raise _unknown(args.id)
            return partner.public()

        return _run(settings, work)

    return command


def cmd_test(args: argparse.Namespace, settings: Settings) -> int:
    from service.webhooks import partners
    from service.webhooks.admin import test_result
    from service.webhooks.sender import Sender, send_test

    async def work(engine: Any) -> Any:
        async with engine.connect() as conn:
            partner = await partners.get_partner(conn, args.id)
        if partner is None:
            raise _unknown(args.id)
        async with Sender(
            timeout=settings.webhook_timeout,
            allow_private=settings.webhook_allow_private_urls,
            clock=_now,
        ) as sender:
            delivery = await send_test(
                sender, partner_id=partner.id, url=partner.url, secrets=partner.live_secrets(_now())
            )
        return test_result(delivery)

    return _run(settings, work)


def cmd_rotate(args: argparse.Namespace, settings: Settings) -> int:
    from service.webhooks import partners

    async def work(engine: Any) -> Any:
        async with engine.begin() as conn:
            rotated = await partners.rotate_secret(
                conn, args.id, now=_now(), overlap=settings.secret_rotation_overlap
            )
        if rotated is None:
            raise _unknown(args.id)
        partner, secret = rotated
        return {**partner.public(), "secret": secret}

    return _run(settings, work)


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    from service.webhooks import partners

    async def work(engine: Any) -> Any:
        async with engine.begin() as conn:
            if await partners.get_partner(conn, args.id) is None:
                raise _unknown(args.id)
            requeued = await partners.retry_failed(conn, args.id, now=_now())
        return {"partnerId": args.id, "requeued": requeued}

    return _run(settings, work)


# --- events -----------------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from service.bodies import parse_json_object
    from service.errors import ServiceError
    from service.webhooks import outbox

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        data = parse_json_object(raw)
    except OSError as error:
        print(f"cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 1
    except ServiceError as error:
        _print(error.body(), sys.stderr)
        return 1

    async def work(engine: Any) -> Any:
        # A worker in another process sees the event at its next poll.
        published = await outbox.publish_event(engine, data, now=_now())
        return {"eventId": published.event_id, "deliveries": published.deliveries}

    return _run(settings, work)


# --- worker -----------------------------------------------------------------------------------


async def _work(settings: Settings, concurrency: int) -> None:
    from service import collector
    from service.db.engine import create_engine
    from service.metrics import Metrics
    from service.webhooks.worker import Worker

    engine = create_engine(settings.database_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    worker = Worker(
        engine, settings=settings, clock=_now, metrics=Metrics(), concurrency=concurrency
    )
    try:
        await worker.start()
        collector.tune()
        await stop.wait()
        await worker.stop()
    finally:
        await engine.dispose()


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from service.db.engine import migrate

    migrate(settings.database_url)
    print("delivering webhooks; stop with Ctrl-C or SIGTERM", file=sys.stderr)
    asyncio.run(_work(settings, args.concurrency))
    return 0


def register(commands: Any) -> None:
    """Add ``partners``, ``events`` and ``worker`` to the ``python -m service`` parser."""
    group = commands.add_parser("partners", help="onboarded webhook partners")
    partner_commands = group.add_subparsers(dest="partners_command", required=True)

    add = partner_commands.add_parser("add", help="onboard a partner; prints its secret once")
    add.add_argument("--name", required=True)
    add.add_argument("--url", required=True, help="https endpoint that receives signed deliveries")
    add.add_argument("--events", help="comma-separated event kinds (default: every kind)")
    add.set_defaults(run=cmd_add)

    partner_commands.add_parser("list", help="every partner, without secrets").set_defaults(run=cmd_list)
    for name, run, text in (
        ("pause", _status_command("paused"), "hold the partner's deliveries"),
        ("resume", _status_command("active"), "deliver what waited, and what comes"),
        ("test", cmd_test, "send a signed test delivery now"),
        ("rotate-secret", cmd_rotate, "issue a new secret; the old one signs for the overlap"),
        ("retry", cmd_retry, "requeue the partner's failed deliveries"),
    ):
        command = partner_commands.add_parser(name, help=text)
        command.add_argument("id", help="partner id")
        command.set_defaults(run=run)

    group = commands.add_parser("events", help="webhook events")
    event_commands = group.add_subparsers(dest="events_command", required=True)
    publish = event_commands.add_parser("publish", help="validate, store and fan out one event")
    publish.add_argument("file", help="a JSON object {event, ...members}; - reads stdin")
    publish.set_defaults(run=cmd_publish)

    worker = commands.add_parser("worker", help="deliver webhooks (no HTTP server)")
    worker.add_argument("--concurrency", type=int, default=32, help="attempts in flight")
    worker.set_defaults(run=cmd_worker)
