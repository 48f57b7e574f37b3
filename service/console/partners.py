"""``/console/partners`` and each partner's page, with its actions: add, edit, pause, resume, send a
test, rotate the secret, retry what failed, remove. Each action is one ``Operations`` call.

A new secret (onboarding, rotation) is shown once: it travels sealed to the page that follows the
action and is cleared as that page is served, so a reload never shows it again.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from service.console import charts
from service.console.pages import Console, form, posted
from service.console.session import PATH
from service.events import EVENT_MODELS
from service.exceptions import DomainError, InvalidInput, UnknownResource
from service.summaries_ops import OUTCOMES

PARTNERS = PATH + "/partners"
RECENT = 10  # deliveries on a partner's page; the full list is a link away


def _number(value: str | None) -> int | str | None:
    """A form's whole number in ASCII digits (``isdigit`` also passes digits like "²" that ``int``
    cannot read); what is not one goes through as given, for the operation to refuse."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else value


def _partner_body(request: Request, *, change: bool) -> dict[str, Any]:
    fields = form(request)
    kinds = list(posted(request).get("events", []))
    body: dict[str, Any] = {"name": fields.get("name", ""), "url": fields.get("url", "")}
    if change or kinds:
        body["events"] = kinds or None
    cap = _number(fields.get("maxInFlight"))
    if change or cap is not None:
        body["maxInFlight"] = cap
    return body


def register(bp: Blueprint, console: Console) -> None:
    kinds = sorted(EVENT_MODELS)

    def partner_form(
        request: Request,
        *,
        partner: dict[str, Any] | None,
        values: dict[str, Any],
        errors: list[Any],
        status: int = 200,
    ) -> HTTPResponse:
        return console.render(
            request,
            "partner_form.html",
            status=status,
            title="Edit partner" if partner else "Add partner",
            partner=partner,
            values=values,
            errors={error.field.split(".")[0]: error.message for error in errors},
            kinds=kinds,
        )

    @bp.get("/partners")
    async def partners(request: Request) -> HTTPResponse:
        operations = console.operations(request)
        found = (await operations.list_partners())["partners"]
        waiting = (await operations.outbox_stats()).by_partner
        return console.render(request, "partners.html", title="Partners", partners=found, waiting=waiting)

    @bp.get("/partners/new")
    async def new_partner(request: Request) -> HTTPResponse:
        return partner_form(
            request,
            partner=None,
            values={"name": "", "url": "", "events": None, "maxInFlight": None},
            errors=[],
        )

    @bp.post("/partners")
    async def add(request: Request) -> HTTPResponse:
        body = _partner_body(request, change=False)
        try:
            made = await console.operations(request).onboard(body)
        except InvalidInput as error:
            values = {"events": None, "maxInFlight": None, **body}
            return partner_form(request, partner=None, values=values, errors=error.field_errors, status=400)
        except DomainError as error:
            return console.refused(request, error, back=PARTNERS + "/new")
        return console.done(
            request,
            f"{PARTNERS}/{made['id']}",
            message="Partner added.",
            secret=made["secret"],
            partner=made["id"],
        )

    @bp.get("/partners/<partner_id:str>")
    async def partner(request: Request, partner_id: str) -> HTTPResponse:
        operations = console.operations(request)
        try:
            shown = await operations.show_partner(partner_id)
        except UnknownResource:
            return console.not_found(request, "No partner has this id.")
        waiting = (await operations.outbox_stats()).by_partner.get(partner_id)
        summaries = console.summaries(request)
        activity = await summaries.partner_activity(partner_id)
        recent = await summaries.deliveries({"partner": partner_id}, limit=RECENT)
        return console.render(
            request,
            "partner.html",
            title=shown["name"],
            partner=shown,
            waiting=waiting,
            activity=activity,
            outcomes=OUTCOMES,
            names={partner_id: shown["name"]},
            hour_bars=charts.stacked(
                [(hour.strftime("%H:00"), counts) for hour, counts in activity["hours"]]
            ),
            recent=recent.rows,
            more=recent.next is not None,
            overlap=console.settings.secret_rotation_overlap,
            now=console.clock(),
        )

    @bp.get("/partners/<partner_id:str>/edit")
    async def edit_page(request: Request, partner_id: str) -> HTTPResponse:
        try:
            shown = await console.operations(request).show_partner(partner_id)
        except UnknownResource:
            return console.not_found(request, "No partner has this id.")
        return partner_form(request, partner=shown, values=shown, errors=[])

    @bp.post("/partners/<partner_id:str>/edit")
    async def edit(request: Request, partner_id: str) -> HTTPResponse:
        """The partner is read first, so a change to one that does not exist is the not-found page
        whatever the form held, and a refused change shows the form over the partner as it is."""
        body = _partner_body(request, change=True)
        operations = console.operations(request)
        try:
            shown = await operations.show_partner(partner_id)
            await operations.update(partner_id, body)
        except UnknownResource:
            return console.not_found(request, "No partner has this id.")
        except InvalidInput as error:
            return partner_form(request, partner=shown, values=body, errors=error.field_errors, status=400)
        except DomainError as error:
            return console.refused(request, error, back=f"{PARTNERS}/{partner_id}")
        return console.done(request, f"{PARTNERS}/{partner_id}", message="Partner changed.")

    async def act(request: Request, partner_id: str, action: str) -> HTTPResponse:
        operations = console.operations(request)
        back = f"{PARTNERS}/{partner_id}"
        try:
            if action == "pause":
                await operations.pause(partner_id)
                return console.done(request, back, message="Partner paused: its deliveries wait.")
            if action == "resume":
                await operations.resume(partner_id)
                return console.done(request, back, message="Partner resumed: what waited goes out now.")
            if action == "retry":
                requeued = (await operations.retry(partner_id))["requeued"]
                return console.done(request, back, message=f"{requeued} failed deliveries requeued.")
            if action == "test":
                result = (await operations.test(partner_id))["attempt"]
                answered = result["statusCode"] if result["statusCode"] is not None else result["errorClass"]
                return console.done(
                    request,
                    back,
                    message=f"Test delivery {result['outcome']}: {answered}.",
                    excerpt=result["responseExcerpt"],
                )
            overlap = _number(form(request).get("overlapSeconds"))
            rotated = await operations.rotate_secret(
                partner_id, {"overlapSeconds": overlap} if overlap is not None else {}
            )
        except DomainError as error:
            return console.refused(request, error, back=back)
        ends = rotated["previousSecretExpiresAt"]
        said = f"the previous secret signs until {ends}" if ends else "the previous secret no longer signs"
        return console.done(
            request, back, message=f"Secret rotated; {said}.", secret=rotated["secret"], partner=partner_id
        )

    for action in ("pause", "resume", "retry", "test", "rotate"):

        async def handler(request: Request, partner_id: str, action: str = action) -> HTTPResponse:
            return await act(request, partner_id, action)

        bp.add_route(
            handler, f"/partners/<partner_id:str>/{action}", methods=["POST"], name=f"partner_{action}"
        )

    @bp.get("/partners/<partner_id:str>/remove")
    async def remove_page(request: Request, partner_id: str) -> HTTPResponse:
        try:
            shown = await console.operations(request).show_partner(partner_id)
        except UnknownResource:
            return console.not_found(request, "No partner has this id.")
        return console.render(request, "partner_remove.html", title=f"Remove {shown['name']}", partner=shown)

    @bp.post("/partners/<partner_id:str>/remove")
    async def remove(request: Request, partner_id: str) -> HTTPResponse:
        try:
            removed = await console.operations(request).remove(partner_id)
        except DomainError as error:
            return console.refused(request, error, back=PARTNERS)
        return console.done(
            request,
            PARTNERS,
            message=f"Partner removed; {removed['cancelled']} undelivered deliveries cancelled.",
        )
