"""``python -m service partners|events|prune|worker``: the operator's webhook commands.

They call the same functions as the admin routes. Answers are JSON on stdout; errors are the
service's JSON error shape on stderr with exit status 1. A new or rotated secret is printed once,
in the answer, and nowhere else.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from service import commands
from service.clock import utc_now
from service.settings import Settings
from service.webhooks.operations import Operations
from service.webhooks.worker_http import DEFAULT_HOST, DEFAULT_PORT

Command = Callable[[argparse.Namespace, Settings], int]
log = logging.getLogger(__name__)


def _run(settings: Settings, work: Callable[[Operations], Awaitable[Any]]) -> int:
    """Run ``work(operations)`` as a command (``service.commands.run``), with a sender of its own
    for test deliveries."""
    from service.webhooks.sender import Sender

    async def with_operations(engine: AsyncEngine) -> Any:
        sender = Sender(
            timeout=settings.webhook_timeout,
            allow_private=settings.webhook_allow_private_urls,
            clock=utc_now,
        )
        async with sender:
            return await work(Operations(engine, settings, utc_now, sender))

    return commands.run(settings, with_operations)


def _on_partner(operation: Callable[[Operations, str], Awaitable[Any]]) -> Command:
    """A command whose one argument is a partner id."""

    def command(args: argparse.Namespace, settings: Settings) -> int:
        return _run(settings, lambda operations: operation(operations, args.id))

    return command


# --- partners ---------------------------------------------------------------------------------


def _kinds(text: str) -> list[str]:
    return [kind.strip() for kind in text.split(",") if kind.strip()]


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    data: dict[str, Any] = {"name": args.name, "url": args.url}
    if args.events is not None:
        data["events"] = _kinds(args.events)
    return _run(settings, lambda operations: operations.onboard(data))


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.list_partners())


# --- events -----------------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from service.bodies import parse_json_object
    from service.errors import ServiceError

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        data = parse_json_object(raw)
    except OSError as error:
        print(f"cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 1
    except ServiceError as error:
        commands.print_json(error.body(), sys.stderr)
        return 1
    # A worker in another process hears of it by NOTIFY (PostgreSQL) or at its next poll.
    return _run(settings, lambda operations: operations.publish(data))


# --- retention ------------------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.prune(args.older_than))


# --- worker -----------------------------------------------------------------------------------


async def _work(settings: Settings, args: argparse.Namespace) -> int:
    """Deliver until SIGINT or SIGTERM, with /healthz, /readyz and /metrics on the worker's port."""
    from service import collector
    from service.db.engine import create_engine
    from service.metrics import Metrics
    from service.webhooks import worker_http
    from service.webhooks.worker import Worker

    engine = create_engine(settings.database_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    metrics = Metrics()
    worker = Worker(engine, settings=settings, clock=utc_now, metrics=metrics, concurrency=args.concurrency)
    app = worker_http.create_app(
        heartbeat=worker,
        engine=engine,
        metrics=metrics,
        clock=utc_now,
        stale_after=worker_http.stale_after(worker.poll_interval),
    )
    try:
        try:
            runner = await worker_http.start(app, args.host, args.port)
        except OSError as error:
            log.error("cannot listen on %s:%s: %s", args.host, args.port, error.strerror)
            return 1
        try:
            await worker.start()
            collector.tune()
            host, port = runner.addresses[0][:2]
            log.info("delivering webhooks", extra={"health": f"http://{host}:{port}/healthz"})
            await stop.wait()
            await worker.stop()
        finally:
            await runner.cleanup()
    finally:
        await engine.dispose()
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from service import logs
    from service.db.engine import migrate

    logs.configure()  # JSON lines on stderr, like serve
    migrate(settings.database_url)
    return asyncio.run(_work(settings, args))


DATABASE = commands.DATABASE
PARTNER_URLS = ("database_url", "webhook_allow_private_urls")  # a URL's destination is checked
TESTING = (*PARTNER_URLS, "webhook_timeout")
ROTATING = ("database_url", "secret_rotation_overlap")
DELIVERING = (
    *TESTING,
    "webhook_retry_schedule",
    "webhook_connect_timeout",
    "webhook_max_in_flight",
    "webhook_breaker_failures",
    "webhook_breaker_cooldown",
    "webhook_disable_after",
    "retention_days",  # the worker prunes hourly
)
PRUNING = ("database_url", "retention_days")


def register(group: Any) -> None:
    """Add ``partners``, ``events``, ``prune`` and ``worker`` to the ``python -m service`` parser."""
    partners = commands.add_command(
        group, "partners", "onboarded webhook partners", settings=(*TESTING, "secret_rotation_overlap")
    )
    partner_commands = partners.add_subparsers(dest="partners_command", required=True, metavar="COMMAND")

    add = commands.add_command(
        partner_commands,
        "add",
        "onboard a partner; prints its secret once",
        details="The URL must be https and resolve only to public addresses. The answer is the only "
        "place the partner's secret is ever shown.",
        settings=PARTNER_URLS,
    )
    add.add_argument("--name", required=True, help="the partner's name, shown in listings")
    add.add_argument("--url", required=True, help="https endpoint that receives signed deliveries")
    add.add_argument("--events", help="comma-separated event kinds (default: every kind)")
    add.set_defaults(run=cmd_add)

    commands.add_command(
        partner_commands, "list", "every partner, without secrets", settings=DATABASE
    ).set_defaults(run=cmd_list)
    for name, run, summary, settings in (
        ("show", _on_partner(Operations.show_partner), "one partner, without its secret", DATABASE),
        ("pause", _on_partner(Operations.pause), "hold the partner's deliveries", DATABASE),
        ("resume", _on_partner(Operations.resume), "deliver what waited, and what comes", DATABASE),
        ("test", _on_partner(Operations.test), "send a signed test delivery now", TESTING),
        (
            "rotate-secret",
            _on_partner(Operations.rotate_secret),
            "issue a new secret; the old one signs for the overlap",
            ROTATING,
        ),
        ("retry", _on_partner(Operations.retry), "requeue the partner's failed deliveries", DATABASE),
    ):
        command = commands.add_command(partner_commands, name, summary, settings=settings)
        command.add_argument("id", help="partner id")
        command.set_defaults(run=run)

    events = commands.add_command(group, "events", "webhook events", settings=DATABASE)
    event_commands = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    publish = commands.add_command(
        event_commands,
        "publish",
        "validate, store and fan out one event",
        details="Checked against the event catalog and stored with one delivery per subscribed "
        "partner, in one transaction; a worker sends them.",
        settings=DATABASE,
    )
    publish.add_argument("file", help="a JSON object {event, ...members}; - reads stdin")
    publish.set_defaults(run=cmd_publish)

    prune = commands.add_command(
        group,
        "prune",
        "delete settled deliveries, their attempts and settled events past the retention",
        details="Deletes delivered and failed deliveries last changed more than the retention ago, "
        "their attempts, and events stored that long ago with no delivery left, in small batches "
        "that never hold up delivery; prints the counts. The newest event naming each room is kept, "
        "so sitemap.xml keeps every room. Registrations and partners are never pruned. Workers also "
        "prune hourly.",
        settings=PRUNING,
    )
    prune.add_argument(
        "--older-than",
        type=int,
        metavar="DAYS",
        help="prune what is older than this many days (default: SERVICE_RETENTION_DAYS)",
    )
    prune.set_defaults(run=cmd_prune)

    worker = commands.add_command(
        group,
        "worker",
        "deliver webhooks, with probes and metrics on a port of its own",
        details="Delivers due webhooks until SIGINT or SIGTERM; any number of workers may share one "
        "PostgreSQL. Serves GET /healthz (503 when its delivery loop is stuck), /readyz (503 when "
        "the database is unreachable) and /metrics (Prometheus) on --host:--port.",
        settings=DELIVERING,
    )
    worker.add_argument(
        "--concurrency", type=int, default=32, help="attempts in flight (default: %(default)s)"
    )
    worker.add_argument(
        "--host", default=DEFAULT_HOST, help="address of /healthz, /readyz, /metrics (default: %(default)s)"
    )
    worker.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="their port, 0 for any free one (default: %(default)s)"
    )
    worker.set_defaults(run=cmd_worker)
