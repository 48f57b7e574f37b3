"""Admin routes for partners, events and deliveries (DESIGN.md "Admin controls").

Bearer-guarded like every /admin route (``service.admin.admin_blueprint``). Secrets appear only in
the answers to onboarding and rotation; every other answer shows ``Partner.public()``.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from service.admin import admin_blueprint, int_arg
from service.bodies import read_body
from service.errors import BadRequest, FieldError, NotFound
from service.events import format_timestamp
from service.webhooks import outbox, partners, runtime
from service.webhooks.partners import ACTIVE, PAUSED, Partner
from service.webhooks.sender import TEST_EVENT, TestDelivery, send_test

MAX_PAGE = 1000  # deliveries per page, each with its attempts


def _unknown_partner() -> NotFound:
    return NotFound("No partner has this id.")


async def _partner(request: Request, partner_id: str) -> Partner:
    async with request.app.ctx.engine.connect() as conn:
        partner = await partners.get_partner(conn, partner_id)
    if partner is None:
        raise _unknown_partner()
    return partner


def _choice(request: Request, name: str, allowed: tuple[str, ...]) -> str | None:
    value: str | None = request.args.get(name)
    if value is not None and value not in allowed:
        raise BadRequest(errors=[FieldError(name, "invalid", "Must be one of: " + ", ".join(allowed) + ".")])
    return value


def test_result(delivery: TestDelivery) -> dict[str, Any]:
    attempt = delivery.attempt
    ok = attempt.status_code is not None and 200 <= attempt.status_code < 300
    return {
        "ok": ok,
        "deliveryId": delivery.delivery_id,
        "eventId": delivery.event_id,
        "event": TEST_EVENT,
        "attempt": {
            "startedAt": format_timestamp(attempt.started_at),
            "durationMs": attempt.duration_ms,
            "statusCode": attempt.status_code,
            "errorClass": attempt.error_class,
            "responseExcerpt": attempt.response_excerpt,
            "outcome": "delivered" if ok else "failed",
        },
    }


def create_blueprint() -> Blueprint:
    bp = admin_blueprint("webhook_admin")

    @bp.post("/partners")
    async def onboard(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        new = partners.validate_new_partner(read_body(request, form=False))
        await partners.check_destination(
            new.url,
            allow_private=ctx.settings.webhook_allow_private_urls,
            resolve=runtime.resolver(request.app),
        )
        async with ctx.engine.begin() as conn:
            partner = await partners.create_partner(
                conn, new, now=ctx.clock(), partner_id=ctx.ids(partners.PARTNER_PREFIX)
            )
        return json_response({**partner.public(), "secret": partner.secret}, status=201)

    @bp.get("/partners")
    async def list_all(request: Request) -> HTTPResponse:
        async with request.app.ctx.engine.connect() as conn:
            found = await partners.list_partners(conn)
        return json_response({"partners": [partner.public() for partner in found]})

    @bp.get("/partners/<partner_id:str>")
    async def show(request: Request, partner_id: str) -> HTTPResponse:
        return json_response((await _partner(request, partner_id)).public())

    async def _set_status(request: Request, partner_id: str, status: str) -> HTTPResponse:
        ctx = request.app.ctx
        async with ctx.engine.begin() as conn:
            partner = await partners.set_status(conn, partner_id, status, now=ctx.clock())
        if partner is None:
            raise _unknown_partner()
        if status == ACTIVE:
            runtime.state(request.app).wake.set()  # its waiting deliveries go out now
        return json_response(partner.public())

    @bp.post("/partners/<partner_id:str>/pause")
    async def pause(request: Request, partner_id: str) -> HTTPResponse:
        return await _set_status(request, partner_id, PAUSED)

    @bp.post("/partners/<partner_id:str>/resume")
    async def resume(request: Request, partner_id: str) -> HTTPResponse:
        return await _set_status(request, partner_id, ACTIVE)

    @bp.post("/partners/<partner_id:str>/test")
    async def test(request: Request, partner_id: str) -> HTTPResponse:
        partner = await _partner(request, partner_id)
        delivery = await send_test(
            runtime.state(request.app).sender,
            partner_id=partner.id,
            url=partner.url,
            secrets=partner.live_secrets(request.app.ctx.clock()),
        )
        return json_response(test_result(delivery))

    @bp.post("/partners/<partner_id:str>/rotate-secret")
    async def rotate(request: Request, partner_id: str) -> HTTPResponse:
        ctx = request.app.ctx
        async with ctx.engine.begin() as conn:
            rotated = await partners.rotate_secret(
                conn, partner_id, now=ctx.clock(), overlap=ctx.settings.secret_rotation_overlap
            )
        if rotated is None:
            raise _unknown_partner()
        partner, secret = rotated
        return json_response({**partner.public(), "secret": secret})

    @bp.post("/partners/<partner_id:str>/retry")
    async def retry(request: Request, partner_id: str) -> HTTPResponse:
        ctx = request.app.ctx
        await _partner(request, partner_id)
        async with ctx.engine.begin() as conn:
            requeued = await partners.retry_failed(conn, partner_id, now=ctx.clock())
        if requeued:
            runtime.state(request.app).wake.set()
        return json_response({"partnerId": partner_id, "requeued": requeued})

    @bp.post("/events")
    async def publish(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        published = await outbox.publish_event(
            ctx.engine,
            read_body(request, form=False),
            now=ctx.clock(),
            wake=runtime.state(request.app).wake,
        )
        discovery = getattr(ctx, "discovery", None)
        if discovery is not None and not published.duplicate:
            discovery.rooms_changed()  # sitemap.xml lists the rooms events name
        return json_response({"eventId": published.event_id, "deliveries": published.deliveries}, status=202)

    @bp.get("/deliveries")
    async def list_deliveries(request: Request) -> HTTPResponse:
        status = _choice(request, "status", outbox.STATUSES)
        limit = int_arg(request, "limit", 100, 1, MAX_PAGE)
        offset = int_arg(request, "offset", 0, 0, 2**62)
        async with request.app.ctx.engine.connect() as conn:
            found = await outbox.list_deliveries(
                conn,
                partner_id=request.args.get("partner"),
                status=status,
                event_id=request.args.get("event"),
                limit=limit,
                offset=offset,
            )
        return json_response({"deliveries": found})

    return bp
