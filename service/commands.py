"""What every operator command shares: its help screen, and one way to run an operation.

``add_command`` makes a command's parser: its summary, a description, and an epilog listing the
``SERVICE_*`` variables it reads, each with the meaning and default the ``Settings`` model gives it.

``run`` migrates, opens the engine, acts for ``cli:`` and the operating-system user in the audit
trail (``service.audit``), runs the operation and prints its JSON answer on stdout; a refusal is
the admin API's error shape on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TextIO

from sqlalchemy.ext.asyncio import AsyncEngine

from service import audit
from service.db.engine import check_database, create_engine, migrate
from service.exceptions import DomainError
from service.params import ascii_whole
from service.settings import Settings

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
    names = tuple(settings)
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


def print_json(document: Any, out: TextIO | None = None) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2), file=out or sys.stdout)


def run(
    settings: Settings,
    work: Callable[[AsyncEngine], Awaitable[Any]],
    *,
    show: Callable[[Any], None] = print_json,
) -> int:
    """Run ``work(engine)`` on a migrated database; ``show`` its answer, or print the refusal."""
    check_database(settings.database_url)
    migrate(settings.database_url)

    async def main() -> Any:
        audit.act_as(audit.command_actor())
        engine = create_engine(settings.database_url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    try:
        answer = asyncio.run(main())
    except DomainError as error:
        print_json(error.body(), sys.stderr)
        return 1
    show(answer)
    return 0
