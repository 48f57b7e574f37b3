"""``python -m service``: serve, migrate, and the operator's commands.

Each command reads ``Settings()`` from the environment, so the CLI and the server always agree.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

from service.db.engine import create_engine, migrate
from service.db.registrations import COLUMNS, iter_registrations
from service.settings import Settings
from service.webhooks import cli as webhooks_cli

Command = Callable[[argparse.Namespace, Settings], int]
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # cells a spreadsheet would run as formulas


def neutralise(cell: Any) -> Any:
    """Prefix a quote to cells a spreadsheet would read as a formula (CSV injection, OWASP)."""
    if isinstance(cell, str) and cell.startswith(FORMULA_LEADS):
        return "'" + cell
    return cell


def serve_warnings(settings: Settings, workers: int) -> list[str]:
    """What an operator should know before ``serve`` starts with these settings."""
    warnings = []
    if workers > 1 and settings.rate_limit_storage.startswith("memory://"):
        warnings.append(
            f"each of the {workers} server processes keeps its own rate-limit counters "
            f"(SERVICE_RATE_LIMIT_STORAGE=memory://), so a client may make up to {workers} times "
            "SERVICE_WAITLIST_RATE_LIMIT; set SERVICE_RATE_LIMIT_STORAGE=redis://HOST:PORT to share them"
        )
    return warnings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from sanic import Sanic
    from sanic.worker.loader import AppLoader

    from service import logs
    from service.app import create_app

    logs.configure()  # the warnings below are JSON lines like every log line `serve` writes
    for warning in serve_warnings(settings, args.workers):
        logging.getLogger(__name__).warning(warning)
    migrate(settings.database_url)
    factory = partial(
        create_app,
        settings,
        name="service",
        run_worker=not args.no_worker,
        structured_logs=True,
        tune_collector=True,
    )
    loader = AppLoader(factory=factory)
    app = loader.load()
    single = args.workers == 1
    app.prepare(host=args.host, port=args.port, workers=args.workers, single_process=single)
    if single:
        # One process, no manager: a signal to this pid reaches the only process serving.
        Sanic.serve_single(primary=app)
    else:
        Sanic.serve(primary=app, app_loader=loader)
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    migrate(settings.database_url)
    print(f"database is at the latest schema: {_safe_url(settings.database_url)}")
    return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


async def _export(settings: Settings, fmt: str, out: TextIO) -> int:
    engine = create_engine(settings.database_url)
    count = 0
    try:
        async with engine.connect() as conn:
            writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
            if writer is not None:
                writer.writerow(COLUMNS)
            async for entry in iter_registrations(conn):
                if writer is not None:
                    writer.writerow([neutralise(entry[column]) for column in COLUMNS])
                else:
                    out.write(json.dumps(entry, ensure_ascii=False) + "\n")
                count += 1
    finally:
        await engine.dispose()
    return count


def cmd_waitlist_export(args: argparse.Namespace, settings: Settings) -> int:
    migrate(settings.database_url)
    count = asyncio.run(_export(settings, args.format, sys.stdout))
    print(f"exported {count} registrations", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="migrate, then serve HTTP (and deliver webhooks)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="server processes")
    serve.add_argument("--no-worker", action="store_true", help="do not deliver webhooks from this server")
    serve.set_defaults(run=cmd_serve)

    commands.add_parser("migrate", help="bring the database to the latest schema").set_defaults(
        run=cmd_migrate
    )

    waitlist = commands.add_parser("waitlist", help="waitlist registrations")
    waitlist_commands = waitlist.add_subparsers(dest="waitlist_command", required=True)
    export = waitlist_commands.add_parser("export", help="write every registration to stdout")
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    export.set_defaults(run=cmd_waitlist_export)

    for register in _EXTENSIONS:
        register(commands)
    return parser


# Other packages add their command groups (partners, events, worker) here.
_EXTENSIONS: list[Callable[[Any], None]] = [webhooks_cli.register]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except ValueError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    run: Command = args.run
    return run(args, settings)
