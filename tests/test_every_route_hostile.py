"""Every route the app serves, found from its router, takes hostile input without a 5xx, without
dropping the connection under a client that keeps it alive, and refuses it in its documented shape.

Each route gets a fixed, seeded run of requests: its own methods and two it may refuse; path
parameters that are real ids, a NUL, invalid UTF-8 or far too long; query parameters the service
reads and some it does not, with such values; JSON, form and garbage bodies, and first of all one
over the body limit. Nothing it sends may be logged at WARNING or above, under the service's own
log configuration. A route added tomorrow is covered without a line here; the narrower
hostile-input tests hold what each answer says.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from service_logs import lines, service_logs
from webhook_helpers import AUTH, deliveries, onboard, publish, room_claimed, settings

from service.bodies import MAX_BODY_BYTES

REQUESTS_A_ROUTE = 10
PARAMETERS = ["partner", "event", "status", "q", "cursor", "limit", "offset", "since", "intent", "email"]
PARAMETERS += ["debug"]  # read by no route
VALUES = ["%00", "a%00b", "%ff", "-1", "1e3", "9" * 40, "x" * 3000, "%F0%9F%98%80", "'--", "2026-13-45", ""]
SEGMENTS = ["%00", "a%00", "..", "%ff", "x" * 300, "%C3%BC"]
TEXTS = ["a\u0000b", "\ud800", "x" * 5000, "", "\u202e", "a\r\nb", "javascript:alert(1)", "http://[::1/"]
FIELDS = ["email", "intent", "name", "url", "events", "maxInFlight", "event", "slug", "ids", "reason"]
GARBAGE = [b"", b"{", b"null", b"[]", b"\x00\xff", b'{"a":' * 2000 + b"1" + b"}" * 2000]
# Sent first to every route, whatever its method: a route that reads it says 413, one that answers
# without reading it must still say it closes the connection, which cannot carry another request.
OVER_THE_LIMIT = b"x" * (MAX_BODY_BYTES + 1)
TYPES = ["application/json", "application/x-www-form-urlencoded"]


def hostile_body(rnd: random.Random, ids: list[str]) -> bytes:
    shape = rnd.random()
    if shape < 0.4:
        values: list[Any] = [rnd.choice(TEXTS), -1, 1e308, None, [], {}, True, rnd.choice(ids)]
        return json.dumps({name: rnd.choice(values) for name in rnd.sample(FIELDS, 4)}).encode()
    if shape < 0.6:
        event = room_claimed()
        event[rnd.choice(list(event))] = rnd.choice(TEXTS)
        return json.dumps(event).encode()
    if shape < 0.7:
        return f"email={rnd.choice(VALUES)}&intent={rnd.choice(VALUES)}".encode()
    return rnd.choice(GARBAGE)


def served(app: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Each route's path pattern and its methods, from the router."""
    found = {("/" + route.path.lstrip("/"), tuple(sorted(route.methods))) for route in app.router.routes}
    return sorted(found)


def in_its_shape(path: str, answer: Any) -> bool:
    """Whether a refusal is in its documented shape: the JSON error shape, ``{"ok": false,
    "message": ..., "errors"?: [...]}``, or under the console an HTML page (a path such as
    ``/console/..`` is another route's, and answers in its shape)."""
    content_type = answer.headers.get("content-type", "")
    if not content_type.startswith("application/json"):
        return path.startswith("/console") and bool(content_type.startswith("text/html"))
    try:
        document = json.loads(answer.text)
    except ValueError:
        return False
    return (
        isinstance(document, dict)
        and document.get("ok") is False
        and isinstance(document.get("message"), str)
        and set(document) <= {"ok", "message", "errors"}
    )


def test_no_route_answers_hostile_input_with_a_server_error(make_client: Any, database_url: str) -> None:
    rnd = random.Random(20261129)
    failed = []
    app_settings = settings(database_url=database_url)
    with service_logs() as written, make_client(**app_settings, structured_logs=True) as client:
        partner_id = onboard(client, "http://127.0.0.1:9/hook")["id"]
        event_id = publish(client, room_claimed())["eventId"]
        ids = [partner_id, event_id, *(delivery["id"] for delivery in deliveries(client))]
        routes = served(client.app)
        assert len(routes) > 50  # the router was read, not an empty list
        for path, methods in routes:
            for number in range(REQUESTS_A_ROUTE):
                method = rnd.choice([*methods, "PUT", "OPTIONS"])
                url = re.sub(r"<[^>]+>", lambda _: rnd.choice(ids + SEGMENTS), path)
                if rnd.random() < 0.7:
                    pairs = [f"{rnd.choice(PARAMETERS)}={rnd.choice(VALUES + ids)}" for _ in range(3)]
                    url += "?" + "&".join(pairs[: rnd.randint(1, 3)])
                headers = {**AUTH, "content-type": rnd.choice(TYPES)}
                if path.startswith("/console"):
                    headers["origin"] = "http://127.0.0.1"
                body = hostile_body(rnd, ids) if method in ("POST", "PATCH", "PUT", "DELETE") else None
                if number == 0:
                    body = OVER_THE_LIMIT
                try:
                    answer = client.request(method, url, headers=headers, content=body)
                except Exception as error:  # the connection dropped under the request
                    failed.append((method, url[:120], repr(error)[:120]))
                    continue
                refused = answer.status >= 400 and method != "HEAD"
                if answer.status >= 500 or (refused and not in_its_shape(path, answer)):
                    failed.append((method, url[:120], answer.status, answer.text[:120]))
    assert failed == []
    # A client's mistakes are no operator's alarm: nothing is logged at WARNING or above.
    assert [line for line in lines(written) if line["level"] not in ("debug", "info")] == []
    assert any(line["logger"] == "service.audit" for line in lines(written))  # the lines were read
