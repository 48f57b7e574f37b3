"""Admin groundwork: the bearer-token guard, its throttle on failures, and GET /admin/waitlist."""

from __future__ import annotations

import pytest

from service.admin import FailedAttempts
from service.ratelimit import WindowCounters

TOKEN = "s3cret-admin-token-for-the-admin-tests"
NOT_FOUND = {"ok": False, "message": "Nothing is here."}
UNAUTHORIZED = {"ok": False, "message": "A valid bearer token is required."}
TOO_MANY = {"ok": False, "message": "Too many requests; try again later."}
AUTH = {"authorization": f"Bearer {TOKEN}"}
# Every shape of admin request a client might use to map the routes: real and unknown paths,
# right and wrong methods, with and without a body.
PROBES = [
    ("GET", "/admin"),
    ("GET", "/admin/"),
    ("GET", "/admin/nothing/here"),
    ("POST", "/admin/nothing"),
    ("GET", "/admin/waitlist"),
    ("DELETE", "/admin/waitlist"),
    ("POST", "/admin/waitlist"),
    ("PUT", "/admin/partners"),
    ("PATCH", "/admin/partners/ptn_unknown"),
    ("OPTIONS", "/admin/partners"),
    ("HEAD", "/admin/metrics"),
    ("TRACE", "/admin/metrics"),
    # The same paths spelled with escapes of unreserved characters (RFC 3986 6.2.2.2), which the
    # documents' respelling would otherwise answer with a 308 to a route and a 404 to none.
    ("GET", "/%61dmin/waitlist"),
    ("GET", "/%61dmin/nothing"),
    ("GET", "/adm%69n/partners"),
    ("HEAD", "/%61dmin/metrics"),
    ("DELETE", "/%61dmin/waitlist"),
]


def _send(client, method, path, headers=None):
    return client.request(
        method,
        path,
        content=b'{"name": "x"}',
        headers={"content-type": "application/json", **(headers or {})},
    )


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


@pytest.mark.parametrize(("method", "path"), PROBES)
def test_every_admin_request_without_the_token_is_401(make_client, method, path):
    """Whatever the path or method, a request without the token is 401: no 404, 405 or Allow."""
    with make_client(admin_token=TOKEN) as client:
        response = _send(client, method, path, {"authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert response.json == (None if method == "HEAD" else UNAUTHORIZED)
    assert response.headers["www-authenticate"] == 'Bearer realm="admin"'
    assert "allow" not in response.headers


@pytest.mark.parametrize(("method", "path"), PROBES)
def test_every_admin_request_is_404_without_a_configured_token(make_client, method, path):
    """With no token configured the whole prefix is hidden: 404 for every path and method."""
    with make_client(admin_token=None) as client:
        response = _send(client, method, path, AUTH)
    assert response.status_code == 404
    assert response.json == (None if method == "HEAD" else NOT_FOUND)
    assert "allow" not in response.headers


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/admin/nothing", 404),
        ("PUT", "/admin/waitlist", 405),
        ("GET", "/administrator", 404),
        ("GET", "/%61dmin/waitlist", 308),
        ("GET", "/%61dmin/nothing", 404),
    ],
)
def test_with_the_token_routing_answers_as_usual(make_client, method, path, status):
    """The token holder sees ordinary routing answers; paths merely starting with "admin" are public."""
    with make_client(admin_token=TOKEN) as client:
        response = _send(client, method, path, AUTH)
    assert response.status_code == status


def test_failed_attempts_are_throttled_per_client(make_client, rate_limit_storage, caplog):
    """Ten wrong tokens a minute answer 401; the eleventh wrong one 429, while the right token still
    answers 200."""
    caplog.set_level("WARNING", logger="service.admin")
    wrong = {"authorization": "Bearer wrong"}
    with make_client(admin_token=TOKEN, **rate_limit_storage) as client:
        for _ in range(5):  # successes are not counted
            assert client.get("/admin/waitlist", headers=AUTH).status_code == 200
        statuses = [_send(client, "GET", f"/admin/guess{n}", wrong).status_code for n in range(10)]
        refused = client.get("/admin/waitlist", headers=wrong)
        with_token = client.get("/admin/waitlist", headers=AUTH)
        public = client.get("/api/v1")
    assert statuses == [401] * 10
    assert (refused.status_code, refused.json) == (429, TOO_MANY)
    assert 1 <= int(refused.headers["retry-after"]) <= 61  # up to the first second past the minute
    assert (with_token.status_code, with_token.json) == (200, {"entries": []})
    assert public.status_code == 200
    locked = [record for record in caplog.records if record.name == "service.admin"]
    assert [(record.getMessage(), record.client) for record in locked] == [
        ("admin authentication locked: too many failed attempts", "127.0.0.1")
    ]


def test_the_throttle_keeps_the_apps_clock(make_client, clock):
    """The in-process throttle times its windows by the clock the app is given, as everything else
    does: eleven wrong tokens at one instant are ten 401s and a 429 wherever a minute's edge falls,
    and two minutes on by that clock the client may try again."""
    wrong = {"authorization": "Bearer wrong"}
    with make_client(admin_token=TOKEN) as client:
        statuses = [client.get("/admin/waitlist", headers=wrong).status_code for _ in range(11)]
        clock.advance(121)  # two windows: nothing of the first still weighs
        again = client.get("/admin/waitlist", headers=wrong)
    assert statuses == [401] * 10 + [429]
    assert again.status_code == 401


@pytest.mark.parametrize(
    ("before", "count", "then", "expected"),
    [
        ({}, 40, AUTH, [401] * 40 + [200]),  # bare requests count nothing
        ({"authorization": "Bearer wrong"}, 30, AUTH, [401] * 10 + [429] * 20 + [200]),
        ({"authorization": "Bearer wrong"}, 30, {"authorization": "Bearer wrong"}, [401] * 10 + [429] * 21),
    ],
    ids=["40-bare-then-right", "30-wrong-then-right", "30-wrong-then-wrong"],
)
def test_the_throttle_counts_wrong_tokens_only_and_never_refuses_the_right_one(
    make_client, rate_limit_storage, before, count, then, expected
):
    """Only wrong tokens are throttled: 40 bare requests then the right token is 200; 30 wrong ones
    turn to 429 after ten, and the right token is still 200."""
    with make_client(admin_token=TOKEN, **rate_limit_storage) as client:
        statuses = [client.get("/admin/waitlist", headers=before).status_code for _ in range(count)]
        statuses.append(client.get("/admin/waitlist", headers=then).status_code)
    assert statuses == expected


def test_failed_attempts_are_counted_per_ipv6_64(monkeypatch, sqlite_url):
    """Guessing from a new address of one /64 each time is still one client: the eleventh is 429."""
    from service.app import create_app
    from service.clock import ManualClock
    from service.settings import Settings
    from tests.conftest import Client

    monkeypatch.setenv("SANIC_PROXIES_COUNT", "1")
    settings = Settings(database_url=sqlite_url, admin_token=TOKEN, trusted_proxies=("127.0.0.1",))
    with Client(create_app(settings, clock=ManualClock())) as client:
        statuses = [
            client.get(
                "/admin/waitlist",
                headers={"authorization": "Bearer wrong", "x-forwarded-for": f"2001:db8:5:5::{n + 1:x}"},
            ).status_code
            for n in range(11)
        ]
        other = client.get("/admin/waitlist", headers={**AUTH, "x-forwarded-for": "2001:db8:5:6::1"})
    assert statuses == [401] * 10 + [429]
    assert other.status_code == 200


async def test_failed_attempts_free_up_as_the_window_slides():
    """A client over the limit may try again once its window has moved on; others are untouched."""
    now = [1_000_000.0]
    attempts = FailedAttempts(WindowCounters(clock=lambda: now[0]), limit="3/minute")
    assert [await attempts.fail("10.0.0.1") for _ in range(3)] == [False, False, True]
    assert await attempts.refused("10.0.0.1") is not None
    assert await attempts.refused("10.0.0.2") is None
    now[0] += 121  # two windows: nothing of the previous one still weighs
    assert await attempts.refused("10.0.0.1") is None


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
                "createdAt": "2026-06-29T12:00:00.000000Z",
                "updatedAt": "2026-06-29T12:00:00.000000Z",
            },
            {
                "email": "bob@example.com",
                "intent": "arcade",
                "project": None,
                "message": "hi",
                "createdAt": "2026-06-29T12:01:01.500000Z",
                "updatedAt": "2026-06-29T12:01:01.500000Z",
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


@pytest.mark.parametrize(
    ("path", "field", "code"),
    [
        ("/admin/waitlist?since=2026-01-01", "since", "unknown_parameter"),
        ("/admin/waitlist?limit=1&limit=2", "limit", "repeated"),
        ("/admin/deliveries?since=2026-01-01", "since", "unknown_parameter"),
        ("/admin/deliveries?status=lost", "status", "invalid"),
        ("/admin/deliveries?limit=%EF%BC%91", "limit", "invalid"),  # a full-width digit one
        ("/admin/deliveries?partner=%FF", "partner", "invalid_encoding"),  # no UTF-8
        ("/admin/deliveries?%FF=1", "\ufffd", "invalid_encoding"),
    ],
)
def test_unknown_or_repeated_query_parameters_are_400(make_client, path, field, code):
    """An admin listing never ignores a parameter it does not know, nor guesses between two values."""
    with make_client(admin_token=TOKEN) as client:
        response = client.get(path, headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 400
    assert [(error["field"], error["code"]) for error in response.json["errors"]] == [(field, code)]


def test_an_address_to_erase_that_is_not_utf8_is_400_and_erases_nothing(make_client):
    """Read with a replacement character, it would match no address and answer 0 erased."""
    with make_client(admin_token=TOKEN) as client:
        assert client.post("/api/waitlist", json={"email": "a@x.com", "intent": "claim"}).status_code == 200
        auth = {"authorization": f"Bearer {TOKEN}"}
        response = client.delete("/admin/waitlist?email=a%FF%40x.com", headers=auth)
        listed = client.get("/admin/waitlist", headers=auth).json
    assert response.status_code == 400
    assert [(error["field"], error["code"]) for error in response.json["errors"]] == [("email", "invalid_encoding")]
    assert [row["email"] for row in listed["entries"]] == ["a@x.com"]


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
        # shown from 0, so that an alert's increase() counts a first burst (deploy/prometheus)
        'service_http_server_errors_total{status="500"}': 0.0,
        'service_http_server_errors_total{status="503"}': 0.0,
    }


def test_an_unreachable_rate_limit_store_refuses_admin_requests(make_client, caplog):
    """With the store down, wrong tokens cannot be counted: they are 503, never unlimited guesses;
    the right token needs no counting and is answered."""
    with make_client(admin_token=TOKEN, rate_limit_storage="redis://127.0.0.1:9/0") as client:
        response = client.get("/admin/waitlist", headers={"authorization": "Bearer wrong"})
        with_token = client.get("/admin/waitlist", headers=AUTH)
    assert with_token.status_code == 200
    assert (response.status_code, response.json) == (
        503,
        {"ok": False, "message": "The service is briefly unavailable; try again shortly."},
    )
    assert "admin authentication could not be counted" in [record.getMessage() for record in caplog.records]


# Header bytes that are not UTF-8 reach the guard as surrogate escapes (b"\x80" as "\udc80").
NOT_UTF8 = [b"Bearer \x80", b"Bearer \xff\xfe", b"Bearer " + TOKEN.encode() + b"\x80", b"Bearer \xed\xa0\x80"]


@pytest.mark.parametrize("authorization", NOT_UTF8)
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/admin/waitlist"), *PROBES[:4], ("PUT", "/admin/partners")]
)
def test_a_token_that_is_not_utf8_is_a_wrong_token(make_client, authorization, method, path):
    """A bearer token that is not UTF-8 is a wrong token like any other, on real and unknown routes
    alike: 401 with the challenge, counted by the throttle, never a 500 that tells routes apart."""
    with make_client(admin_token=TOKEN) as client:
        response = _send(client, method, path, {"authorization": authorization})
        assert (response.status_code, response.json) == (401, UNAUTHORIZED)
        assert response.headers["www-authenticate"] == 'Bearer realm="admin"'
        for _ in range(10):
            _send(client, "GET", "/admin/waitlist", {"authorization": authorization})
        throttled = _send(client, "GET", "/admin/waitlist", {"authorization": authorization})
    assert (throttled.status_code, throttled.json) == (429, TOO_MANY)
