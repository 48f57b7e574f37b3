"""``/console/events/new``: publish one event, its JSON prefilled with the catalog's example."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from service.clock import format_timestamp
from service.console.pages import Console, form
from service.console.session import PATH
from service.events import EVENT_MODELS, example_payload
from service.exceptions import DomainError, InvalidInput, invalid
from service.ids import new_id


def example(kind: str, *, event_id: str, now: datetime) -> str:
    """The catalog's example members of ``kind`` (the kind itself is chosen beside them), with a
    fresh ``eventId`` and ``occurredAt``, so publishing it unchanged is a new event."""
    members = {name: value for name, value in example_payload(EVENT_MODELS[kind]).items() if name != "event"}
    members.update(eventId=event_id, occurredAt=format_timestamp(now))
    return json.dumps(members, indent=2, ensure_ascii=False)


def _members(payload: str) -> dict[str, Any]:
    """The payload field's JSON object; ``InvalidInput`` naming ``payload`` when it is not one, or
    is JSON that Python will not read (a number past its digit limit, nesting past its recursion
    limit), so every payload the operator can fix is the form again with the reason."""
    try:
        found = json.loads(payload)
    except json.JSONDecodeError as error:
        message = f"Not JSON: {error.msg} (line {error.lineno}, column {error.colno})."
        raise invalid("payload", "invalid_json", message) from None
    except (ValueError, RecursionError):
        message = "Not JSON this service reads: a number of too many digits, or nesting too deep."
        raise invalid("payload", "invalid_json", message) from None
    if not isinstance(found, dict):
        raise invalid("payload", "invalid_json", "Must be a JSON object of the event's members.")
    return found


def register(bp: Blueprint, console: Console) -> None:
    kinds = sorted(EVENT_MODELS)

    def page(
        request: Request, *, kind: str, payload: str, errors: list[Any], status: int = 200
    ) -> HTTPResponse:
        return console.render(
            request,
            "event_new.html",
            status=status,
            title="Publish an event",
            kinds=kinds,
            kind=kind,
            payload=payload,
            errors=errors,
        )

    @bp.get("/events/new")
    async def new_event(request: Request) -> HTTPResponse:
        kind = request.args.get("kind")
        if kind not in EVENT_MODELS:
            kind = kinds[0]
        return page(
            request, kind=kind, payload=example(kind, event_id=new_id("evt"), now=console.clock()), errors=[]
        )

    @bp.post("/events")
    async def publish(request: Request) -> HTTPResponse:
        fields = form(request)
        kind = fields.get("event", "")
        payload = fields.get("payload", "")
        try:
            published = await console.operations(request).publish({**_members(payload), "event": kind})
        except InvalidInput as error:
            return page(
                request,
                kind=kind,
                payload=payload,
                status=400,
                errors=[(item.field, item.message) for item in error.field_errors],
            )
        except DomainError as error:
            return console.refused(request, error, back=PATH + "/events/new")
        return console.done(
            request,
            f"{PATH}/deliveries?event={published['eventId']}",
            message=f"Event {published['eventId']} published: {published['deliveries']} deliveries.",
        )
