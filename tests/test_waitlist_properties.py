"""Property-based: whatever JSON or form body arrives, the answer is 200, 400, 413, 415 or 429."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.settings import Settings
from tests.conftest import Client

ALLOWED = {200, 400, 413, 415, 429}
MEMBERS = st.sampled_from(["email", "intent", "project", "message", "extra", ""]) | st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=700)
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8
)
BODIES = st.dictionaries(MEMBERS, JSON_VALUES, max_size=6) | JSON_VALUES
PLAUSIBLE = st.fixed_dictionaries(
    {"email": st.emails() | st.text(max_size=40), "intent": st.sampled_from(["claim", "member", "arcade", "x"])},
    optional={"project": st.text(max_size=130), "message": st.text(max_size=610)},
)
FORM_PAIRS = st.lists(st.tuples(MEMBERS, st.text(max_size=200)), max_size=6)
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/x-www-form-urlencoded", "text/plain", "application/json; charset=utf-16", ""]
)


def _app(tmp_path_factory) -> Client:
    url = f"sqlite:///{tmp_path_factory.mktemp('prop') / 'service.db'}"
    from service.db.engine import migrate

    migrate(url)
    return Client(create_app(Settings(database_url=url, waitlist_rate_limit="100000/minute")))


def test_arbitrary_json_never_errors(tmp_path_factory):
    """Arbitrary JSON values and plausible registrations never make the server answer 5xx."""
    with _app(tmp_path_factory) as client:

        @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(body=BODIES | PLAUSIBLE)
        def check(body):
            raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
            response = client.post("/api/waitlist", content=raw, headers={"content-type": "application/json"})
            assert response.status_code in ALLOWED, response.text
            assert response.json["ok"] is (response.status_code == 200)

        check()


def test_arbitrary_forms_and_bytes_never_error(tmp_path_factory):
    """Arbitrary forms, raw bytes and content types never make the server answer 5xx."""
    with _app(tmp_path_factory) as client:

        @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(pairs=FORM_PAIRS, raw=st.binary(max_size=300), content_type=CONTENT_TYPES, use_raw=st.booleans())
        def check(pairs, raw, content_type, use_raw):
            body = raw if use_raw else urlencode(pairs, encoding="utf-8", errors="surrogatepass").encode()
            headers = {"content-type": content_type} if content_type else {}
            response = client.post("/api/waitlist", content=body, headers=headers)
            assert response.status_code in ALLOWED, response.text
            assert set(response.json) <= {"ok", "message", "errors"}

        check()
