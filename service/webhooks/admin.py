"""Admin routes for partners, events and deliveries: thin adapters over ``Operations``.

Bearer-guarded like every /admin route (``service.admin.admin_blueprint``). Each route reads its
input, calls one operation and answers with its document; domain errors become statuses in the
error handler (``service.errors.from_domain``). Secrets appear only in the answers to onboarding
and rotation.
"""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import empty
from sanic.response import json as json_response

from service.admin import admin_blueprint, query_args
from service.bodies import read_body, read_no_body
from service.webhooks.operations import DeliveryFilter, Operations


def _ops(request: Request) -> Operations:
    operations: Operations = request.app.ctx.operations
    return operations


def create_blueprint() -> Blueprint:
    bp = admin_blueprint("webhook_admin", queries=("list_deliveries",))

    @bp.post("/partners")
    async def onboard(request: Request) -> HTTPResponse:
        return json_response(await _ops(request).onboard(read_body(request, form=False)), status=201)

    @bp.get("/partners")
    async def list_partners(request: Request) -> HTTPResponse:
        return json_response(await _ops(request).list_partners())

    @bp.get("/partners/<partner_id:str>")
    async def show(request: Request, partner_id: str) -> HTTPResponse:
        return json_response(await _ops(request).show_partner(partner_id))

    @bp.patch("/partners/<partner_id:str>")
    async def update(request: Request, partner_id: str) -> HTTPResponse:
        return json_response(await _ops(request).update(partner_id, read_body(request, form=False)))

    @bp.delete("/partners/<partner_id:str>")
    async def remove(request: Request, partner_id: str) -> HTTPResponse:
        read_no_body(request)
        await _ops(request).remove(partner_id)
        return empty()

    @bp.post("/partners/<partner_id:str>/pause")
    async def pause(request: Request, partner_id: str) -> HTTPResponse:
        read_no_body(request)
        return json_response(await _ops(request).pause(partner_id))

    @bp.post("/partners/<partner_id:str>/resume")
    async def resume(request: Request, partner_id: str) -> HTTPResponse:
        read_no_body(request)
        return json_response(await _ops(request).resume(partner_id))

    @bp.post("/partners/<partner_id:str>/test")
    async def test(request: Request, partner_id: str) -> HTTPResponse:
        read_no_body(request)
        return json_response(await _ops(request).test(partner_id))

    @bp.post("/partners/<partner_id:str>/rotate-secret")
    async def rotate(request: Request, partner_id: str) -> HTTPResponse:
        # The body is optional: no body at all (or only white space, as the routes that take none
        # read it) rotates with the default overlap.
        data = read_body(request, form=False) if (request.body or b"").strip() else {}
        return json_response(await _ops(request).rotate_secret(partner_id, data))

    @bp.post("/partners/<partner_id:str>/retry")
    async def retry(request: Request, partner_id: str) -> HTTPResponse:
        read_no_body(request)
        return json_response(await _ops(request).retry(partner_id))

    @bp.post("/events")
    async def publish(request: Request) -> HTTPResponse:
        return json_response(await _ops(request).publish(read_body(request, form=False)), status=202)

    @bp.get("/deliveries")
    async def list_deliveries(request: Request) -> HTTPResponse:
        query = DeliveryFilter.parse(query_args(request))
        return json_response(await _ops(request).list_deliveries(query))

    @bp.post("/deliveries/replay")
    async def replay(request: Request) -> HTTPResponse:
        return json_response(await _ops(request).replay(read_body(request, form=False)), status=202)

    @bp.post("/deliveries/<delivery_id:str>/resend")
    async def resend(request: Request, delivery_id: str) -> HTTPResponse:
        read_no_body(request)
        return json_response(await _ops(request).resend(delivery_id), status=202)

    @bp.get("/workers")
    async def list_workers(request: Request) -> HTTPResponse:
        return json_response(await _ops(request).list_workers())

    return bp
