"""``python -m service partners|deliveries|events|secrets|prune|worker|workers``: the operator's
webhook commands.

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

from service import commands, eventloop
from service.clock import utc_now
from service.exceptions import invalid
from service.keyring import load_keyring
from service.params import ascii_whole
from service.settings import Settings
from service.text import CODE as TEXT_CODE
from service.text import text_fault
from service.webhooks import roster, wiring
from service.webhooks.batching import BATCHABLE, DEFAULT_MAX_EVENTS, DEFAULT_MAX_WAIT
from service.webhooks.operations import DeliveryFilter, Operations
from service.webhooks.worker import CONCURRENCY
from service.webhooks.worker_http import DEFAULT_HOST, DEFAULT_PORT

Command = Callable[[argparse.Namespace, Settings], int]
log = logging.getLogger(__name__)


def _run(
    settings: Settings,
    work: Callable[[Operations], Awaitable[Any]],
    *,
    secrets: bool = False,
    unchecked: bool = False,
) -> int:
    """Run ``work(operations)`` as a command (``service.commands.run``), with a sender of its own
    for test deliveries. A command that handles ``secrets`` loads the key first (and refuses to
    start without one, ``service.keyring``), checks that it opens the secrets stored (but for the
    recovery that deletes those it does not, ``unchecked``), then seals secrets stored before
    sealing (``wiring.seal``)."""
    if secrets:
        load_keyring(settings)  # no key on PostgreSQL: refused before anything changes

    async def with_operations(engine: AsyncEngine) -> Any:
        keyring = None
        if unchecked:
            keyring = load_keyring(settings)
        elif secrets:
            keyring = await wiring.keyring(engine, settings)
        async with wiring.sender(settings, clock=utc_now) as sender:
            return await work(Operations(engine, settings, utc_now, sender, keyring=keyring))

    return commands.run(settings, with_operations)


def _id(text: str) -> str:
    """A partner or delivery id as given, or ``InvalidInput`` naming ``id``: bytes of the command
    line that are not UTF-8 reach it as surrogate escapes, which no database can be asked about.
    Called inside the run, so the refusal is printed in the error shape like any other."""
    if (fault := text_fault(text)) is not None:
        raise invalid("id", TEXT_CODE, fault)
    return text


def _on_partner(operation: Callable[[Operations, str], Awaitable[Any]], *, secrets: bool = False) -> Command:
    """A command whose one argument is a partner id."""

    def command(args: argparse.Namespace, settings: Settings) -> int:
        return _run(settings, lambda operations: operation(operations, _id(args.id)), secrets=secrets)

    return command


def cmd_rotate(args: argparse.Namespace, settings: Settings) -> int:
    data = {} if args.overlap is None else {"overlapSeconds": args.overlap}
    return _run(settings, lambda operations: operations.rotate_secret(_id(args.id), data), secrets=True)


def cmd_reencrypt(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.reencrypt_secrets(), secrets=True)


def cmd_discard_unreadable(args: argparse.Namespace, settings: Settings) -> int:
    return _run(
        settings, lambda operations: operations.discard_unreadable_secrets(), secrets=True, unchecked=True
    )


# --- partners ---------------------------------------------------------------------------------


def _kinds(text: str) -> list[str]:
    return [kind.strip() for kind in text.split(",") if kind.strip()]


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    data: dict[str, Any] = {"name": args.name, "url": args.url}
    if args.events is not None:
        data["events"] = _kinds(args.events)
    if args.max_in_flight is not None:
        data["maxInFlight"] = _whole(args.max_in_flight)  # held to what POST /admin/partners takes
    batch: dict[str, Any] = {}
    if args.batch_events is not None:
        batch["events"] = _kinds(args.batch_events)
    if args.batch_max_events is not None:
        batch["maxEvents"] = args.batch_max_events
    if args.batch_max_wait is not None:
        batch["maxWaitSeconds"] = args.batch_max_wait
    if batch:
        data["batch"] = batch
    return _run(settings, lambda operations: operations.onboard(data), secrets=True)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.list_partners())


def cmd_update(args: argparse.Namespace, settings: Settings) -> int:
    data: dict[str, Any] = {}
    if args.name is not None:
        data["name"] = args.name
    if args.url is not None:
        data["url"] = args.url
    if args.events is not None:
        data["events"] = None if args.events == "all" else _kinds(args.events)
    if args.max_in_flight is not None:
        data["maxInFlight"] = None if args.max_in_flight == "default" else _whole(args.max_in_flight)
    return _run(settings, lambda operations: operations.update(_id(args.id), data))


def _whole(text: str) -> int | str:
    """An option's number as an int, or as given (the operation names what is wrong with it)."""
    number = ascii_whole(text)
    return text if number is None else number


# --- deliveries -------------------------------------------------------------------------------


def cmd_deliveries_list(args: argparse.Namespace, settings: Settings) -> int:
    options = {"partner": args.partner, "status": args.status, "event": args.event}
    options |= {"limit": args.limit, "offset": args.offset}
    given = {name: value for name, value in options.items() if value is not None}
    # Parsed inside the run, so a bad option is answered in the error shape like any refusal.
    return _run(settings, lambda operations: operations.list_deliveries(DeliveryFilter.parse(given)))


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    data = {"since": args.since, "until": args.until, "partner": args.partner, "status": args.status}
    body = {name: value for name, value in data.items() if value is not None}
    return _run(settings, lambda operations: operations.replay(body))


def cmd_resend(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.resend(_id(args.id)))


# --- events -----------------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from service.bodies import MAX_BODY_BYTES, parse_json_object
    from service.errors import PayloadTooLarge, ServiceError

    try:
        # As much as POST /admin/events takes, and one byte more to tell a larger file (or an
        # endless one, /dev/zero) apart without reading it all.
        if args.file == "-":
            raw = sys.stdin.buffer.read(MAX_BODY_BYTES + 1)
        else:
            with Path(args.file).open("rb") as file:
                raw = file.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise PayloadTooLarge()
        data = parse_json_object(raw)
    except OSError as error:
        # The FILE argument is at fault, named as ``_id`` names an id argument: the error shape,
        # exit status 1, as for any refused input.
        reason = error.strerror or type(error).__name__
        return commands.refused(invalid("file", "invalid", f"The file cannot be read: {reason}."))
    except ServiceError as error:
        return commands.refused(error)
    # A worker in another process hears of it by NOTIFY (PostgreSQL) or at its next poll.
    return _run(settings, lambda operations: operations.publish(data))


# --- retention ------------------------------------------------------------------------------


def cmd_workers(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.list_workers())


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    return _run(settings, lambda operations: operations.prune(args.older_than))


# --- worker -----------------------------------------------------------------------------------


async def _work(settings: Settings, args: argparse.Namespace) -> int:
    """Deliver until SIGINT or SIGTERM, with /healthz, /readyz and /metrics on the worker's port."""
    from service import collector, shutdown
    from service.connections import worker_concurrency
    from service.db.engine import create_engine
    from service.metrics import Metrics
    from service.webhooks import worker_http

    engine = create_engine(settings.database_url, bounded=True)
    keyring = await wiring.keyring(engine, settings)  # seals what migration 0005 moved in plaintext
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    metrics = Metrics()
    concurrency = worker_concurrency(args.concurrency)
    if concurrency < args.concurrency:
        log.warning(
            "the open-file limit allows %d attempts in flight, not %d; raise it (ulimit -n, LimitNOFILE)",
            concurrency,
            args.concurrency,
        )
    worker = wiring.worker(
        engine,
        settings,
        clock=utc_now,
        metrics=metrics,
        concurrency=concurrency,
        keyring=keyring,
    )
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
            log.info(
                "delivering webhooks",
                extra={"health": f"http://{host}:{port}/healthz", "loop": eventloop.name(loop)},
            )
            await stop.wait()
            shutdown.arm(shutdown.deadline_for(settings))  # ends the process even on a dead link
            await worker.stop()
        finally:
            await runner.cleanup()
    finally:
        await engine.dispose()
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from service import logs
    from service.db.clockcheck import check_clock
    from service.db.engine import check_database

    load_keyring(settings)  # no key on PostgreSQL: refused before anything starts or changes
    check_database(settings.database_url)  # absent, refusing or unreachable: one line, exit 2
    # Leases are judged by this machine's clock: one too far from the database server's (other
    # workers' machines) is refused in one line, exit 1 (SQLite: one machine, one clock).
    check_clock(settings.database_url)
    logs.configure()  # JSON lines on stderr, like serve
    commands.migrate_schema(settings.database_url)  # a schema newer than this release: one line, exit 2
    return eventloop.run(_work(settings, args))  # serve's loop: uvloop where installed


DATABASE = commands.DATABASE
SECRETS = ("database_url", "secrets_key")  # partner secrets are sealed or opened
PARTNER_URLS = (*SECRETS, "webhook_allow_private_urls")  # a URL's destination is checked
TESTING = (*PARTNER_URLS, "webhook_timeout", "webhook_connect_timeout")
ROTATING = (*SECRETS, "secret_rotation_overlap")
DELIVERING = (
    *TESTING,
    "webhook_retry_schedule",
    "webhook_max_in_flight",
    "webhook_breaker_failures",
    "webhook_breaker_cooldown",
    "webhook_disable_after",
    "retention_days",  # the worker prunes hourly
)
PRUNING = ("database_url", "retention_days")


def register(group: Any) -> None:
    """Add ``partners``, ``events``, ``prune``, ``worker`` and ``workers`` to the ``python -m
    service`` parser."""
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
    add.add_argument(
        "--max-in-flight",
        metavar="N",
        help="its own cap on attempts in flight (default: SERVICE_WEBHOOK_MAX_IN_FLIGHT)",
    )
    add.add_argument(
        "--batch-events",
        help="comma-separated high-volume kinds to deliver in batches, one POST per kind "
        f"(any of: {', '.join(BATCHABLE)})",
    )
    add.add_argument(
        "--batch-max-events",
        type=int,
        help=f"a batch goes out when this many events wait (default {DEFAULT_MAX_EVENTS})",
    )
    add.add_argument(
        "--batch-max-wait",
        type=float,
        help=f"...or when the oldest has waited this many seconds (default {DEFAULT_MAX_WAIT:g})",
    )
    add.set_defaults(run=cmd_add)

    commands.add_command(
        partner_commands, "list", "every partner, without secrets", settings=DATABASE
    ).set_defaults(run=cmd_list)
    for name, run, summary, settings in (
        ("show", _on_partner(Operations.show_partner), "one partner, without its secret", DATABASE),
        ("pause", _on_partner(Operations.pause), "hold the partner's deliveries", DATABASE),
        ("resume", _on_partner(Operations.resume), "deliver what waited, and what comes", DATABASE),
        ("test", _on_partner(Operations.test, secrets=True), "send a signed test delivery now", TESTING),
        ("retry", _on_partner(Operations.retry), "requeue the partner's failed deliveries", DATABASE),
    ):
        command = commands.add_command(partner_commands, name, summary, settings=settings)
        command.add_argument("id", help="partner id")
        command.set_defaults(run=run)
    update = commands.add_command(
        partner_commands,
        "update",
        "change a partner's name, URL, event kinds or cap",
        details="Only the options given change. A new URL is checked as at onboarding; deliveries not "
        "yet sent go to it. --events all (every kind) and --max-in-flight default undo a choice.",
        settings=("database_url", "webhook_allow_private_urls"),
    )
    update.add_argument("id", help="partner id")
    update.add_argument("--name", help="the partner's name, shown in listings")
    update.add_argument("--url", help="https endpoint that receives signed deliveries")
    update.add_argument("--events", help="comma-separated event kinds, or all")
    update.add_argument("--max-in-flight", metavar="N", help="its own cap on attempts in flight, or default")
    update.set_defaults(run=cmd_update)
    delete = commands.add_command(
        partner_commands,
        "delete",
        "remove a partner; its undelivered deliveries are cancelled",
        details="Its secrets are deleted and its pending deliveries become cancelled: never sent. "
        "Deliveries and attempts already logged stay (retention prunes them).",
        settings=DATABASE,
    )
    delete.add_argument("id", help="partner id")
    delete.set_defaults(run=_on_partner(Operations.remove))

    rotate = commands.add_command(
        partner_commands,
        "rotate-secret",
        "issue a new secret; the live ones sign for the overlap",
        details="Prints the new secret once. The secrets live until now keep signing for --overlap "
        "seconds (default SERVICE_SECRET_ROTATION_OVERLAP), never longer than an earlier rotation "
        "left them; --overlap 0 ends them now (after a leak).",
        settings=ROTATING,
    )
    rotate.add_argument("id", help="partner id")
    rotate.add_argument("--overlap", type=int, metavar="SECONDS", help="seconds the old secrets keep signing")
    rotate.set_defaults(run=cmd_rotate)

    keys = commands.add_command(group, "secrets", "partner secrets at rest", settings=SECRETS)
    key_commands = keys.add_subparsers(dest="secrets_command", required=True, metavar="COMMAND")
    commands.add_command(
        key_commands,
        "re-encrypt",
        "encrypt every partner secret under the newest key",
        details="After putting a new key first in SERVICE_SECRETS_KEY: every stored secret is "
        "re-encrypted under it (and expired ones deleted), so the older keys can then be dropped. "
        'Prints {"reencrypted": n, "expiredDeleted": n, "keys": n}.',
        settings=SECRETS,
    ).set_defaults(run=cmd_reencrypt)
    commands.add_command(
        key_commands,
        "discard-unreadable",
        "delete the partner secrets no key opens, after every key that sealed them is lost",
        details="The way back when every key that sealed the stored secrets is lost (serve, worker "
        "and the partner commands refuse a key that opens none of them): every secret no key of "
        "SERVICE_SECRETS_KEY opens is deleted, and the partners left without one are listed; "
        "rotate-secret gives each a new secret, to be sent to the partner. Their deliveries wait "
        'until then. Prints {"discarded": n, "expiredDeleted": n, "partnersWithoutSecret": [id, ...]}.',
        settings=SECRETS,
    ).set_defaults(run=cmd_discard_unreadable)

    deliveries = commands.add_command(group, "deliveries", "webhook deliveries", settings=DATABASE)
    delivery_commands = deliveries.add_subparsers(dest="deliveries_command", required=True, metavar="COMMAND")
    listing = commands.add_command(
        delivery_commands, "list", "deliveries, newest first, with their attempts", settings=DATABASE
    )
    listing.add_argument("--partner", metavar="ID", help="one partner's")
    listing.add_argument("--status", help="pending, delivering, delivered, failed or cancelled")
    listing.add_argument("--event", metavar="EVENT_ID", help="one event's")
    listing.add_argument("--limit", help="at most this many (default 100, at most 1000)")
    listing.add_argument("--offset", help="skip this many first")
    listing.set_defaults(run=cmd_deliveries_list)
    replay = commands.add_command(
        delivery_commands,
        "replay",
        "send again the deliveries created in a window",
        details="Deliveries created at or after --since and before --until (default now), in --status "
        "(failed by default, or delivered), of one partner or of all, become pending and go out "
        "again with their own delivery ids. Times are ISO 8601 with Z or an offset.",
        settings=DATABASE,
    )
    replay.add_argument("--since", required=True, metavar="TIME", help="start of the window (included)")
    replay.add_argument("--until", metavar="TIME", help="end of the window (excluded; default now)")
    replay.add_argument("--partner", metavar="ID", help="only this partner's")
    replay.add_argument("--status", help="failed (default) or delivered")
    replay.set_defaults(run=cmd_replay)
    resend = commands.add_command(
        delivery_commands,
        "resend",
        "send one delivery again, whatever its state",
        details="Same delivery id, a fresh attempt. Refused while it is being attempted, for a "
        "removed partner's delivery, and for one that went out inside a batch (resend the batch's).",
        settings=DATABASE,
    )
    resend.add_argument("id", help="delivery id")
    resend.set_defaults(run=cmd_resend)

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

    commands.add_command(
        group,
        "workers",
        "the delivery workers running now, live or silent",
        details="Every worker (inside serve or alone) writes its row when it starts and every "
        f"{roster.HEARTBEAT.seconds} s, and deletes it when it stops. A row unseen for "
        f"{roster.SILENT_AFTER.seconds} s is listed as silent (stopped, stuck, or cut off from the "
        "database); a day later it is forgotten.",
        settings=DATABASE,
    ).set_defaults(run=cmd_workers)

    worker = commands.add_command(
        group,
        "worker",
        "deliver webhooks, with probes and metrics on a port of its own",
        details="Delivers due webhooks until SIGINT or SIGTERM; any number of workers may share one "
        "PostgreSQL. Serves GET /healthz (503 when its delivery loop is stuck), /readyz (503 when "
        "the database is unreachable or the loop's last transaction failed) and /metrics (Prometheus) "
        "on --host:--port.",
        settings=DELIVERING,
    )
    worker.add_argument(
        "--concurrency",
        type=commands.whole_number(1),
        default=CONCURRENCY,
        help="attempts in flight (default: %(default)s, as in serve)",
    )
    worker.add_argument(
        "--host", default=DEFAULT_HOST, help="address of /healthz, /readyz, /metrics (default: %(default)s)"
    )
    worker.add_argument(
        "--port",
        type=commands.whole_number(0, commands.PORT_MAX),
        default=DEFAULT_PORT,
        help="their port, 0 for any free one (default: %(default)s)",
    )
    worker.set_defaults(run=cmd_worker)
