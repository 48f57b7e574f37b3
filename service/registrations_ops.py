"""The operator's use cases for waitlist registrations, each written once: list, export, erase.

The admin routes (``service.admin``) and the ``waitlist`` commands (``service.cli``) both call
these, and every call is one line of the audit trail (``service.audit``). Like
``service.webhooks.operations``, they raise only the domain errors of ``service.exceptions``.

Erasure removes every registration of an address, whatever its intent, matched by the address's
identity (``service.db.registrations.email_key``), the same key the waitlist stores it under.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from email_validator import EmailNotValidError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.audit import audited
from service.db import registrations as store
from service.emails import check_email
from service.exceptions import invalid
from service.params import refuse_unknown, whole_number
from service.text import text_fault

Document = dict[str, Any]
Entry = dict[str, Any]
MAX_PAGE = 10_000  # entries per page of /admin/waitlist: a page of JSON stays a few MB at most
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # cells a spreadsheet would run as formulas
# A spreadsheet set to split on ";" (the list separator of many locales) splits a cell the CSV
# writer saw no reason to quote, and one that splits on tabs or lines splits on those: a lead
# after any separator starts a cell of its own there.
_LEAD_AFTER_SEPARATOR = re.compile(r"(?<=[;,\t\r\n])(?=[=+\-@])")


def neutralise(cell: Any) -> Any:
    """Prefix a quote to cells a spreadsheet would read as a formula (CSV injection, OWASP), and
    to every formula lead that follows a separator inside one (``Acme;=cmd`` becomes
    ``Acme;'=cmd``): an export's cells, the ``waitlist export`` command's and the console's
    download alike."""
    if not isinstance(cell, str):
        return cell
    cell = _LEAD_AFTER_SEPARATOR.sub("'", cell)
    return "'" + cell if cell.startswith(FORMULA_LEADS) else cell


@dataclass(frozen=True, slots=True)
class Page:
    limit: int = 1000
    offset: int = 0

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> Page:
        """From query parameters (strings); unknown names are refused."""
        refuse_unknown(args, ("limit", "offset"))
        return cls(
            limit=whole_number(args, "limit", 1000, 1, MAX_PAGE),
            offset=whole_number(args, "offset", 0, 0, 2**62),
        )


INVALID_EMAIL = "This is not a valid email address."


def erasure_address(email: str | None) -> str:
    """The address to erase, trimmed; refused when blank, or holding what no stored address can
    (a NUL, a lone surrogate). Whether the waitlist accepts it today is ``erase_registrations``'
    question: an older release stored addresses today's rules refuse, and those are erased too."""
    if email is None or not email.strip():
        raise invalid("email", "missing", "This parameter is required.")
    address = email.strip()
    if text_fault(address) is not None:
        raise invalid("email", "invalid_email", INVALID_EMAIL)
    return address


def _accepted(address: str) -> bool:
    try:
        check_email(address)
    except EmailNotValidError:
        return False
    return True


@audited
@dataclass
class RegistrationOperations:
    engine: AsyncEngine

    async def list_registrations(self, page: Page) -> Document:
        async with self.engine.connect() as conn:
            entries = await store.list_registrations(conn, limit=page.limit, offset=page.offset)
        return {"entries": entries}

    async def export_registrations(self, write: Callable[[Entry], object]) -> Document:
        """Every registration, oldest first, handed to ``write`` one at a time (streamed, so an
        export of millions stays small). A ``write`` that returns an awaitable (a coroutine
        function) is waited for before the next row is read: a download sent as it goes then sets
        the pace, and no rows pile up in memory while its client reads slowly."""
        count = 0
        async with self.engine.connect() as conn:
            async for entry in store.iter_registrations(conn):
                written = write(entry)
                if inspect.isawaitable(written):
                    await written
                count += 1
        return {"exported": count}

    async def erase_registrations(self, email: str | None) -> Document:
        """Delete every registration of the address (right to erasure); how many there were.

        Erasing an address the waitlist does not hold is not an error: it answers 0. An address
        today's rules refuse is erased where an older release stored it, and refused as a typo
        (400) where nothing is stored under it.
        """
        address = erasure_address(email)
        async with self.engine.begin() as conn:
            erased = await store.erase_registrations(conn, store.email_key(address))
        if not erased and not _accepted(address):
            raise invalid("email", "invalid_email", INVALID_EMAIL)
        return {"erased": erased}
