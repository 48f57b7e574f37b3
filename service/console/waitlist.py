"""``/console/waitlist``: registrations newest first, a page at a time by key; Export CSV (a
download, formula cells neutralised as ``waitlist export`` does) and Erase an address (after a
confirmation page)."""

from __future__ import annotations

import csv
import io
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from service.console.pages import Console, form, link, query
from service.console.session import PATH
from service.db.registrations import COLUMNS
from service.exceptions import DomainError, InvalidInput
from service.registrations_ops import erasure_address, neutralise
from service.summaries_ops import INTENTS

WAITLIST = PATH + "/waitlist"
CHUNK_BYTES = 64 * 1024  # the CSV download goes out in pieces of about this size


def register(bp: Blueprint, console: Console) -> None:
    @bp.get("/waitlist")
    async def waitlist(request: Request) -> HTTPResponse:
        try:
            args = query(request)
            page = await console.summaries(request).registrations(args)
        except InvalidInput as error:
            return console.refused(request, error, back=WAITLIST)
        return console.render(
            request,
            "waitlist.html",
            title="Waitlist",
            page=page,
            args=args,
            intents=INTENTS,
            next_link=link(WAITLIST, {**args, "after": page.next}) if page.next else None,
        )

    @bp.post("/waitlist/export")
    async def export(request: Request) -> None:
        """Every registration, oldest first, streamed as CSV while the database is read.

        Each piece is sent before more rows are read: a client that reads slowly holds the reading
        back, so the server never keeps more than a piece and the driver's batch in memory, and a
        client that leaves ends the reading (its connection goes back to the pool). A reverse proxy
        that buffers answers would read the whole export at once in the client's place:
        ``X-Accel-Buffering: no`` tells nginx to pass it on as it comes."""
        response = await request.respond(
            content_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="waitlist.csv"', "X-Accel-Buffering": "no"},
        )
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(COLUMNS)

        async def write(entry: dict[str, Any]) -> None:
            writer.writerow([neutralise(entry[column]) for column in COLUMNS])
            if buffer.tell() >= CHUNK_BYTES:
                await response.send(buffer.getvalue())
                buffer.seek(0)
                buffer.truncate()

        await console.registrations(request).export_registrations(write)
        await response.send(buffer.getvalue())
        await response.eof()

    @bp.post("/waitlist/erase")
    async def erase(request: Request) -> HTTPResponse:
        fields = form(request)
        email = fields.get("email", "")
        try:
            address = erasure_address(email)
        except InvalidInput as error:
            return console.refused(request, error, back=WAITLIST)
        if fields.get("confirm") != "yes":
            return console.render(request, "erase_confirm.html", title="Erase an address", email=address)
        try:
            erased = (await console.registrations(request).erase_registrations(address))["erased"]
        except DomainError as error:
            return console.refused(request, error, back=WAITLIST)
        console.totals.forget()
        return console.done(request, WAITLIST, message=f"{erased} registrations of that address erased.")
