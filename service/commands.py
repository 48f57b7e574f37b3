"""What every operator command shares: its help screen, and one way to run an operation.

``add_command`` makes a command's parser: its summary, a description, and an epilog listing the
``SERVICE_*`` variables it reads, each with the meaning and default the ``Settings`` model gives it.

``run`` migrates, opens the engine, acts for ``cli:`` and the operating-system user in the audit
trail (``service.audit``), runs the operation and prints its JSON answer on stdout; a refusal is
the admin API's error shape on stderr with exit status 1 (``refused``), and a database that cannot
do the work now (what the admin API answers 503) one line on stderr, exit status 1, or 2 where
the fault will not pass on its own (``service.db.faults.lasting``).

Output goes through ``STDOUT``, so output that cannot be written (a closed pipe, a full disk) is
told apart from a database that failed (``OutputFailed``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from alembic.script.revision import ResolutionError
from alembic.util import CommandError
from sqlalchemy.ext.asyncio import AsyncEngine

from service import audit
from service.db.engine import DatabaseUnusable, check_database, create_engine, migrate
from service.db.faults import lasting
from service.exceptions import DomainError
from service.params import ascii_whole
from service.settings import Settings

if TYPE_CHECKING:
    from service.errors import ServiceError

WIDTH = 88  # help screens fit a terminal of this many columns
EVERY_SETTING = tuple(Settings.model_fields)
DATABASE = ("database_url",)
PORT_MAX = 65535  # --port takes 0 (any free port) to this


def variable(name: str) -> str:
    """The environment variable of a ``Settings`` field."""
    prefix = Settings.model_config.get("env_prefix", "")
    return f"{prefix}{name}".upper()


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(_shown(part) for part in value) or "empty"
    return str(value)


def settings_help(names: Iterable[str], defaults: Mapping[str, str] | None = None) -> str:
    """Each variable a command reads: its name, then its meaning and default, indented below.
    ``defaults`` says what a command uses in place of a setting's own default, where it differs."""
    lines = ["settings (environment variables):"]
    for name in names:
        field = Settings.model_fields[name]
        lines.append(f"  {variable(name)}")
        default = (defaults or {}).get(name) or _shown(field.get_default(call_default_factory=True))
        text = f"{field.description or ''} Default: {default}.".lstrip()
        lines += textwrap.wrap(
            text, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False
        )
    return "\n".join(lines)


def help_screen(
    summary: str,
    details: str = "",
    settings: Iterable[str] = (),
    defaults: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The parser options of a help screen: the summary and details as its description (wrapped
    here, since the epilog's layout must be kept), the settings as its epilog."""
    paragraphs = [summary[:1].upper() + summary[1:] + "."] + ([details] if details else [])
    names = tuple(dict.fromkeys(settings))  # commands add to shared lists, which may overlap
    return {
        "description": "\n\n".join(textwrap.fill(text, WIDTH, break_on_hyphens=False) for text in paragraphs),
        "epilog": settings_help(names, defaults) if names else None,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def add_command(
    group: Any,
    name: str,
    summary: str,
    *,
    details: str = "",
    settings: Iterable[str] = (),
    defaults: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """A command under ``group`` (what ``add_subparsers`` returned): ``summary`` in its parent's
    list and atop its own screen, then ``details``, then the settings it reads (with ``defaults``
    where the command's own differ from the settings')."""
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=summary, **help_screen(summary, details, settings, defaults)
    )
    return parser


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An option's ``type``: a whole number from ``low`` (to ``high``), else a usage error naming
    the range before anything starts (a port of 70000 was bound as 4464, a count of 0 failed once
    started)."""
    allowed = f" from {low} to {high}" if high is not None else f", at least {low}"

    def number(text: str) -> int:
        value = ascii_whole(text)
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number{allowed}")
        return value

    return number


class OutputFailed(audit.AnswerLost):
    """A command's output could not be written: its reader went away (``| head``) or its disk is
    full. Raised in place of the ``OSError`` and not chained to it, so neither the audit trail nor
    ``service.db.faults.unavailable`` takes it for the database failing: the audit line says
    ``cancelled`` for a reader gone, or the reason."""

    def __init__(self, error: OSError) -> None:
        self.closed_pipe = isinstance(error, BrokenPipeError)
        super().__init__(error.strerror or str(error), gone=self.closed_pipe)


class Stdout:
    """``sys.stdout`` (whatever it is when written to) for a command's output: a write or flush
    that fails raises ``OutputFailed``."""

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except OSError as error:
            raise OutputFailed(error) from None

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except OSError as error:
            raise OutputFailed(error) from None


STDOUT = Stdout()


def output_failed(failed: OutputFailed) -> int:
    """Exit status 1 for output that could not be written: silently when the reader went away, as
    a program killed by SIGPIPE would, else with one line (a full disk).

    Python's recipe for a program that does not die of SIGPIPE (the ``signal`` module's "Note on
    SIGPIPE"): stdout is pointed at ``os.devnull``, so the interpreter's own flush at exit, which
    would fail again with a traceback and exit status 120, has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    if not failed.closed_pipe:
        print(f"error: the output cannot be written ({failed})", file=sys.stderr)
    return 1


def print_json(document: Any, out: TextIO | Stdout | None = None) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2), file=out or STDOUT)


def refused(error: DomainError | ServiceError) -> int:
    """Exit status 1, with the body the admin API answers ``error`` with on stderr: the same
    message, and the same field errors, as many as it shows (``service.errors.shown``)."""
    # Imported here: a command loads the web framework's errors only once something is refused.
    from service.errors import from_domain

    answer = from_domain(error) if isinstance(error, DomainError) else error
    print_json(answer.body(), sys.stderr)
    return 1


def migrate_schema(database_url: str) -> None:
    """``migrate``, but a database at a schema revision this release does not know raises
    ``DatabaseUnusable`` (one line, exit status 2).

    A deployment rolled back after a newer release migrated the database finds it so; no release
    can move it (this one cannot tell what the newer revision changed), and a server restarted
    over and over would meet the same revision every time."""
    try:
        migrate(database_url)
    except CommandError as error:
        if not isinstance(error.__cause__, ResolutionError):
            raise
        revision = error.__cause__.argument
        raise DatabaseUnusable(
            f"the database is at schema revision {revision}, which this release does not know "
            "(was it migrated by a newer release?)"
        ) from None


def _innermost(error: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's wrappers, whose words say what happened."""
    seen = error
    while (inner := getattr(seen, "orig", None) or seen.__cause__) is not None and inner is not seen:
        seen = inner
    return seen


def storage_fault(error: BaseException) -> str:
    """The one line for an error the database raised because it cannot do the work now (locked by
    another writer past the busy timeout, unreachable, its disk full), or will not until it is
    mended (``service.db.faults.lasting``: a table missing, a file that is not a database)."""
    cause = _innermost(error)
    reason = (str(cause).splitlines() or [type(cause).__name__])[0]
    if lasting(error):
        return f"error: the database cannot do this ({reason}); trying again will not help"
    return f"error: the database cannot do this now ({reason}); try again shortly"


def run(
    settings: Settings,
    work: Callable[[AsyncEngine], Awaitable[Any]],
    *,
    show: Callable[[Any], None] = print_json,
) -> int:
    """Run ``work(engine)`` on a migrated database; ``show`` its answer, or print why not.

    Exit status 0 with the answer shown; 1 with the error shape on stderr when the operation
    refused (``refused``). A database that cannot do the work now (the faults the admin API
    answers 503: a lock held past the busy timeout, the database gone) raises, and
    ``service.cli.main`` says so in one line (``storage_fault``), exit status 1, as it does for
    every command and start; 2 for such a fault that will not pass (a table missing), and for
    ``DatabaseUnusable``, when it cannot be used at all. Output that cannot be written raises
    ``OutputFailed``, never taken for a database fault.
    """
    check_database(settings.database_url)

    async def main() -> Any:
        audit.act_as(audit.command_actor())
        engine = create_engine(settings.database_url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    try:
        migrate_schema(settings.database_url)
        answer = asyncio.run(main())
    except DomainError as error:
        return refused(error)
    show(answer)
    return 0
