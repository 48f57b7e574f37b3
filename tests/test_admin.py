"""Admin groundwork: the bearer-token guard and GET /admin/waitlist."""

from __future__ import annotations

import pytest

TOKEN = "s3cret-admin-token"
NOT_FOUND = {"ok": False, "message": "Nothing is here."}
UNAUTHORIZED = {"ok": False, "message": "A valid bearer token is required."}


@pytest.mark.parametrize("token", [None, ""])
def test_admin_routes_are_hidden_without_a_token(make_client, token):
    """With no admin token configured, admin routes answer 404 whatever the client sends."""
    with make_client(admin_token=token) as client:
        response = client.get("/admin/waitlist", headers={"authorization": "Bearer anything"})
    assert (response.status_code, response.json) == (404, NOT_FOUND)


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"],
)
def test_wrong_or_missing_token_is_401(make_client, authorization):
    """Anything but the exact bearer token is 401 with a WWW-Authenticate challenge."""
    headers = {} if authorization is None else {"authorization": authorization}
    with make_client(admin_token=TOKEN) as client:
        response = client.get("/admin/waitlist", headers=headers)
    assert (response.status_code, response.json) == (401, UNAUTHORIZED)
    assert response.headers["www-authenticate"] == 'Bearer realm="admin"'


def test_waitlist_listing_returns_entries(make_client, clock):
    """GET /admin/waitlist lists registrations with the documented keys, oldest first."""
    with make_client(admin_token=TOKEN) as client:
        client.post("/api/waitlist", json={"email": "Ada@Example.com", "intent": "claim", "project": "ADA"})
        clock.advance(61.5)
        client.post("/api/waitlist", json={"email": "bob@example.com", "intent": "arcade", "message": "hi"})
        response = client.get("/admin/waitlist", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.json == {
        "entries": [
            {
                "email": "Ada@Example.com",
                "intent": "claim",
                "project": "ADA",
                "message": None,
                "createdAt": "2026-06-29T12:00:00.000Z",
                "updatedAt": "2026-06-29T12:00:00.000Z",
            },
            {
                "email": "bob@example.com",
                "intent": "arcade",
                "project": None,
                "message": "hi",
                "createdAt": "2026-06-29T12:01:01.500Z",
                "updatedAt": "2026-06-29T12:01:01.500Z",
            },
        ]
    }


@pytest.mark.parametrize(
    ("query", "emails"),
    [("", ["a0", "a1", "a2"]), ("?limit=2", ["a0", "a1"]), ("?limit=2&offset=2", ["a2"]), ("?offset=5", [])],
)
def test_waitlist_listing_pages(make_client, query, emails):
    """`limit` and `offset` page through the listing."""
    with make_client(admin_token=TOKEN) as client:
        for n in range(3):
            client.post("/api/waitlist", json={"email": f"a{n}@example.com", "intent": "member"})
        response = client.get(f"/admin/waitlist{query}", headers={"authorization": f"Bearer {TOKEN}"})
    assert [entry["email"].split("@")[0] for entry in response.json["entries"]] == emails


@pytest.mark.parametrize("query", ["?limit=0", "?limit=-1", "?limit=abc", "?limit=10001", "?offset=x"])
def test_bad_paging_is_400(make_client, query):
    """A paging value that is not a whole number in range is a 400 naming the parameter."""
    name = query[1:].split("=")[0]
    with make_client(admin_token=TOKEN) as client:
        response = client.get(f"/admin/waitlist{query}", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 400
    assert response.json["errors"][0]["field"] == name


def test_metrics_count_registrations_by_intent_and_errors_by_status(make_client):
    """/admin/metrics: 200s by intent (repeats too), 4xx by status, 429s; each label counted apart."""
    with make_client(admin_token=TOKEN, waitlist_rate_limit="6/minute") as client:
        for body in (
            {"email": "a@example.com", "intent": "claim"},
            {"email": "a@example.com", "intent": "claim"},
            {"email": "b@example.com", "intent": "member"},
            {"email": "not-an-address", "intent": "member"},
        ):
            client.post("/api/waitlist", json=body)
        client.get("/nothing-here")
        client.post("/api/waitlist", content=b"x", headers={"content-type": "text/plain"})
        for _ in range(3):  # the 415 was the 5th request: the 6th is allowed, the 7th and 8th are not
            client.post("/api/waitlist", json={"email": "c@example.com", "intent": "arcade"})
        text = client.get("/admin/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("service_waitlist_", "service_http_")) and "_created" not in line
    }
    assert samples == {
        'service_waitlist_registrations_total{intent="claim"}': 2.0,
        'service_waitlist_registrations_total{intent="member"}': 1.0,
        'service_waitlist_registrations_total{intent="arcade"}': 1.0,
        "service_waitlist_rate_limited_total": 2.0,
        'service_http_client_errors_total{status="400"}': 1.0,
        'service_http_client_errors_total{status="404"}': 1.0,
        'service_http_client_errors_total{status="415"}': 1.0,
        'service_http_client_errors_total{status="429"}': 2.0,
    }
