"""``python -m service``: serve, migrate, and the operator's commands.

Each command reads ``Settings()`` from the environment, so the CLI and the server always agree.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import ipaddress
import json
import logging
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NoReturn

from pydantic import ValidationError

from service import commands
from service.db.engine import DatabaseUnusable, check_database, sqlite_directory, sqlite_path
from service.db.faults import lasting, unavailable
from service.db.registrations import COLUMNS
from service.keyring import Keyring, KeyringError, UnreadableSecret, load_keyring
from service.registrations_ops import RegistrationOperations, neutralise
from service.settings import Settings
from service.webhooks import cli as webhooks_cli

Command = Callable[[argparse.Namespace, Settings], int]


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a name, not an address


def listen_base_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` as this machine reaches ``serve --host HOST --port PORT``.

    Listening on every interface (0.0.0.0, ::) is reached on loopback here; an IPv6 address is
    bracketed, as URLs write them.
    """
    if _unspecified(host):
        host = "::1" if ":" in host else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def serve_settings(settings: Settings, host: str, port: int) -> Settings:
    """The settings ``serve`` runs with: unless ``SERVICE_BASE_URL`` is set, every absolute URL in
    the documents names the host and port being served, so ``--port 9000`` links to port 9000."""
    if "base_url" in settings.model_fields_set:  # set in the environment (or by the caller)
        return settings
    return settings.model_copy(update={"base_url": listen_base_url(host, port)})


def serve_warnings(settings: Settings, workers: int, host: str = "127.0.0.1") -> list[str]:
    """What an operator should know before ``serve`` starts with these settings."""
    warnings = []
    if workers > 1 and settings.rate_limit_storage.startswith("memory://"):
        warnings.append(
            f"each of the {workers} server processes keeps its own rate-limit counters "
            f"(SERVICE_RATE_LIMIT_STORAGE=memory://), so a client may make up to {workers} times "
            "SERVICE_WAITLIST_RATE_LIMIT; set SERVICE_RATE_LIMIT_STORAGE=redis://HOST:PORT to share them"
        )
    if workers > 1 and settings.admin_token is not None:
        warnings.append(
            f"the {workers} server processes share one port, so a scrape of /admin/metrics reaches one "
            "of them and shows its counters alone (Prometheus reads each change of process as a reset); "
            "for monitoring, run one process per port and scrape each (deploy/systemd: service-server@PORT)"
        )
    if _unspecified(host) and "base_url" not in settings.model_fields_set:
        warnings.append(
            f"serving on every interface ({host}) with SERVICE_BASE_URL unset: the documents name "
            "this machine's loopback address; set SERVICE_BASE_URL to the address clients use"
        )
    return warnings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from sanic import Sanic
    from sanic.config import Config
    from sanic.worker.loader import AppLoader

    from service import logs, proxies
    from service.app import create_app
    from service.connections import GuardedProtocol
    from service.db.clockcheck import check_clock
    from service.discovery.content import ContentError, load_content
    from service.shutdown import deadline_for

    keyring = load_keyring(settings)  # no key on PostgreSQL: refused before anything starts or changes
    refused = proxies.misconfiguration(Config(), proxies.parse_networks(settings.trusted_proxies))
    if refused is not None:
        print(f"configuration error: {refused}", file=sys.stderr)
        return 2
    try:
        load_content(settings.content_file)  # read again by the app: here it stops the start first
    except ContentError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    check_database(settings.database_url)  # absent, refusing or unreachable: one line, exit 2
    if not args.no_worker:
        # Its worker's leases are judged by this machine's clock: one too far from the database
        # server's (other workers' machines) is refused in one line, exit 1 (SQLite: one clock).
        check_clock(settings.database_url)
    logs.configure()  # the warnings below are JSON lines like every log line `serve` writes
    for warning in serve_warnings(settings, args.workers, args.host):
        logging.getLogger(__name__).warning(warning)
    settings = serve_settings(settings, args.host, args.port)
    commands.migrate_schema(settings.database_url)  # a schema newer than this release: one line, exit 2
    asyncio.run(_seal(settings, keyring))  # a key that opens none of the stored secrets: exit 2
    factory = partial(
        create_app,
        settings,
        name="service",
        run_worker=not args.no_worker,
        structured_logs=True,
        tune_collector=True,
        shutdown_deadline=deadline_for(settings),
    )
    loader = AppLoader(factory=factory)
    app = loader.load()
    single = args.workers == 1
    # The cap on connections and the deadlines for slow clients (service.connections).
    app.prepare(
        host=args.host, port=args.port, workers=args.workers, single_process=single, protocol=GuardedProtocol
    )
    try:
        if single:
            # One process, no manager: a signal to this pid reaches the only process serving.
            Sanic.serve_single(primary=app)
        else:
            Sanic.serve(primary=app, app_loader=loader)
    except OSError as error:  # binding --host:--port: a port in use, a name that does not resolve
        logging.getLogger(__name__).error("cannot listen on %s:%s: %s", args.host, args.port, error.strerror)
        return 1
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    # The key first: the schema is not moved by a deployment whose servers could not start.
    keyring = load_keyring(settings)
    check_database(settings.database_url)
    commands.migrate_schema(settings.database_url)
    print(f"database is at the latest schema: {_safe_url(settings.database_url)}", file=commands.STDOUT)
    sealed = asyncio.run(_seal(settings, keyring))
    if sealed:
        print(f"encrypted {sealed} partner secrets stored in plaintext", file=commands.STDOUT)
    return 0


async def _seal(settings: Settings, keyring: Keyring) -> int:
    from service.db.engine import create_engine
    from service.webhooks import wiring

    engine = create_engine(settings.database_url)
    try:
        return await wiring.seal(engine, keyring)
    finally:
        await engine.dispose()


def _safe_url(url: str) -> str:
    from service.db.engine import shown_url

    return shown_url(url)


def cmd_waitlist_export(args: argparse.Namespace, settings: Settings) -> int:
    writer = csv.writer(commands.STDOUT, lineterminator="\n") if args.format == "csv" else None
    # The CSV header goes out with the first row (or alone, once an empty export is done), so an
    # export the database refused leaves `> waitlist.csv` empty rather than a header that looks
    # like an empty waitlist.
    started = False

    def start() -> None:
        nonlocal started
        if writer is not None and not started:
            writer.writerow(COLUMNS)
        started = True

    def write(entry: dict[str, Any]) -> None:
        start()
        if writer is not None:
            writer.writerow([neutralise(entry[column]) for column in COLUMNS])
        else:
            commands.STDOUT.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def show(answer: dict[str, int]) -> None:
        start()
        print(f"exported {answer['exported']} registrations", file=sys.stderr)

    return commands.run(
        settings, lambda engine: RegistrationOperations(engine).export_registrations(write), show=show
    )


def cmd_waitlist_erase(args: argparse.Namespace, settings: Settings) -> int:
    return commands.run(
        settings, lambda engine: RegistrationOperations(engine).erase_registrations(args.email)
    )


DESCRIPTION = """\
The launch waitlist, discovery and webhook service: serve it, migrate its database, and run the
operator's commands. Every command reads the same SERVICE_* environment variables as the server,
so a command and the server always agree; each command's --help lists the ones it reads."""
DATABASE = commands.DATABASE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service",
        description=DESCRIPTION,
        epilog=commands.settings_help(commands.EVERY_SETTING),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_command(
        group,
        "serve",
        "migrate, then serve HTTP and deliver webhooks",
        details="The public API, the discovery documents and the admin API on --host:--port. Unless "
        "--no-worker, each server process also delivers webhooks.",
        settings=commands.EVERY_SETTING,
        defaults={"base_url": "http://HOST:PORT, as --host and --port give them"},
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument(
        "--port",
        type=commands.whole_number(0, commands.PORT_MAX),
        default=8000,
        help="port to listen on (default: %(default)s)",
    )
    serve.add_argument(
        "--workers", type=commands.whole_number(1), default=1, help="server processes (default: %(default)s)"
    )
    serve.add_argument("--no-worker", action="store_true", help="do not deliver webhooks from this server")
    serve.set_defaults(run=cmd_serve)

    commands.add_command(
        group,
        "migrate",
        "bring the database to the latest schema",
        details="Safe at any time; serve and every command also migrate before they start. Partner "
        "secrets stored in plaintext by an earlier release are then encrypted, when a key is at hand.",
        settings=(*DATABASE, "secrets_key"),
    ).set_defaults(run=cmd_migrate)

    waitlist = commands.add_command(group, "waitlist", "waitlist registrations", settings=DATABASE)
    waitlist_commands = waitlist.add_subparsers(dest="waitlist_command", required=True, metavar="COMMAND")
    export = commands.add_command(
        waitlist_commands,
        "export",
        "write every registration to stdout, oldest first",
        details="CSV cells a spreadsheet would run as a formula get a leading quote; JSONL keeps "
        "every value exactly as stored.",
        settings=DATABASE,
    )
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="default: %(default)s")
    export.set_defaults(run=cmd_waitlist_export)
    erase = commands.add_command(
        waitlist_commands,
        "erase",
        "erase every registration of an address",
        details="Every intent, matched as the waitlist matches addresses: trimmed, whatever the case. "
        'Prints {"erased": n}; an address the waitlist does not hold erases 0.',
        settings=DATABASE,
    )
    erase.add_argument("--email", required=True, help="the address, in any case")
    erase.set_defaults(run=cmd_waitlist_erase)

    for register in _EXTENSIONS:
        register(group)
    return parser


# Other packages add their command groups (partners, events, worker) here.
_EXTENSIONS: list[Callable[[Any], None]] = [webhooks_cli.register]


def one_line(error: ValidationError) -> str:
    """Each refused setting's reason, naming its variable, on one line (never the value)."""
    reasons = []
    for problem in error.errors(include_input=False, include_url=False):
        reason = str(problem["msg"]).removeprefix("Value error, ")
        name = commands.variable(str(problem["loc"][0])) if problem["loc"] else ""
        reasons.append(reason if not name or name in reason else f"{name}: {reason}")
    return "; ".join(" ".join(reason.split()) for reason in reasons)


def entry() -> NoReturn:
    """The program: JSON log lines on stderr (the audit trail among them), then the command."""
    from service import logs

    logs.configure()
    try:
        status = main()
        commands.STDOUT.flush()  # what is still buffered, written where its failure is caught
    except commands.OutputFailed as failed:
        status = commands.output_failed(failed)
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as error:
        print(f"configuration error: {one_line(error)}", file=sys.stderr)
        return 2
    run: Command = args.run
    try:
        database = sqlite_path(settings.database_url)
        if database is not None:
            # Made here, before anything else beside the file (the key file, service.keyring): a
            # directory that cannot be made stops every command in the same line, exit status 2.
            sqlite_directory(database)
        return run(args, settings)
    except KeyringError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    except DatabaseUnusable as error:
        print(f"error: {error}", file=sys.stderr)
        # Unreachable now may answer in a moment: 1, which the units restart; 2 they do not.
        return 1 if error.passing else 2
    except UnreadableSecret as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        # The database locked past the busy timeout, or gone, once past the start's check (while
        # it is migrated, say): a moment's fault, one line and exit status 1, not a traceback. A
        # fault that will not pass (a table missing, a file that is not a database): exit 2.
        if not unavailable(error):
            raise
        print(commands.storage_fault(error), file=sys.stderr)
        return 2 if lasting(error) else 1
