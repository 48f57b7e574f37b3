"""``/console/deliveries`` (newest first, a page at a time by key, with the Replay form) and each
delivery's page (its payload and every attempt, with Resend)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sanic import Blueprint, HTTPResponse, Request

from service.console.pages import Console, form, link, query
from service.console.session import PATH
from service.exceptions import DomainError, InvalidInput
from service.states import REPLAYABLE, DeliveryStatus

DELIVERIES = PATH + "/deliveries"
MINUTE = "%Y-%m-%dT%H:%M"  # what a datetime-local field sends


def _moment(value: str | None) -> str | None:
    """A datetime-local field (read as UTC) as the ISO-8601 text replay takes; other text as given."""
    if not value:
        return None
    try:
        return datetime.strptime(value, MINUTE).replace(tzinfo=UTC).isoformat()
    except ValueError:
        return value


def register(bp: Blueprint, console: Console) -> None:
    async def listing(
        request: Request, *, replay_errors: dict[str, str], replay: dict[str, str], status: int = 200
    ) -> HTTPResponse:
        try:
            args = query(request)
            page = await console.summaries(request).deliveries(args)
        except InvalidInput as error:
            return console.refused(request, error, back=DELIVERIES)
        names = await console.summaries(request).partner_names()
        live = await console.summaries(request).partner_names(removed=False)
        return console.render(
            request,
            "deliveries.html",
            status=status,
            title="Deliveries",
            page=page,
            names=names,  # a removed partner's deliveries still name it
            choices=live,  # what may be chosen: not a removed partner
            args=args,
            statuses=list(DeliveryStatus),
            replayable=list(REPLAYABLE),
            next_link=link(DELIVERIES, {**args, "after": page.next}) if page.next else None,
            replay=replay,
            replay_errors=replay_errors,
        )

    @bp.get("/deliveries")
    async def deliveries(request: Request) -> HTTPResponse:
        since = (console.clock() - timedelta(days=1)).astimezone(UTC).strftime(MINUTE)
        return await listing(request, replay_errors={}, replay={"since": since, "status": "failed"})

    @bp.post("/deliveries/replay")
    async def replay(request: Request) -> HTTPResponse:
        fields = form(request)
        body = {
            name: value
            for name, value in (
                ("since", _moment(fields.get("since"))),
                ("until", _moment(fields.get("until"))),
                ("partner", fields.get("partner") or None),
                ("status", fields.get("status") or None),
            )
            if value is not None  # a blank field is left out: replay names a missing since as the API does
        }
        try:
            done = await console.operations(request).replay(body)
        except InvalidInput as error:
            errors = {item.field: item.message for item in error.field_errors}
            return await listing(request, replay_errors=errors, replay=fields, status=400)
        except DomainError as error:
            return console.refused(request, error, back=DELIVERIES)
        return console.done(request, DELIVERIES, message=f"{done['deliveries']} deliveries requeued.")

    @bp.get("/deliveries/<delivery_id:str>")
    async def delivery(request: Request, delivery_id: str) -> HTTPResponse:
        found = await console.summaries(request).delivery(delivery_id)
        if found is None:
            return console.not_found(request, "No delivery has this id.")
        names = await console.summaries(request).partner_names()
        return console.render(
            request, "delivery.html", title=f"Delivery {delivery_id}", delivery=found, names=names
        )

    @bp.post("/deliveries/<delivery_id:str>/resend")
    async def resend(request: Request, delivery_id: str) -> HTTPResponse:
        back = f"{DELIVERIES}/{delivery_id}"
        try:
            await console.operations(request).resend(delivery_id)
        except DomainError as error:
            return console.refused(request, error, back=back)
        return console.done(request, back, message="Delivery resent: a fresh attempt is due now.")
