"""The signature test vectors: every verdict is the service's verifiers' own, the Standard Webhooks
library signs the same values, the document never changes under a partner, and it is served like
every other read-only document."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks import Webhook

from service.discovery import vectors
from service.discovery.vectors import NOW, REASONS, SIGNED_AT, vectors_document
from service.events import EVENT_MODELS
from service.webhooks.signing import SignatureError, verify, verify_standard

BASE = "https://rooms.example"
DOCUMENT = vectors_document(BASE)
CASES = {case["id"]: case for case in DOCUMENT["cases"]}
VERIFIERS = {"x-service-signature": verify, "webhook-signature": verify_standard}
# The cases of version 1.0 as first published. Cases may be appended; these never change.
FIRST_CASES = 21
FIRST_CASES_SHA256 = "d448a7c38a7cc1c4ea916631cf0b79e4101dc4fd7cbac3a56330ca2912cb98be"


def verdict(scheme: str, case: dict[str, Any]) -> dict[str, Any]:
    """What the service's own verifier for ``scheme`` decides, in the document's terms."""
    try:
        VERIFIERS[scheme](case["headers"], case["body"].encode("utf-8"), case["secrets"], now=DOCUMENT["now"])
    except SignatureError as error:
        [reason] = [name for name, (kind, _) in REASONS.items() if type(error) is kind]
        return {"accept": False, "reason": reason}
    return {"accept": True, "reason": None}


@pytest.mark.parametrize("case_id", list(CASES))
@pytest.mark.parametrize("scheme", list(VERIFIERS))
def test_the_service_verifiers_reach_every_expected_verdict(case_id: str, scheme: str) -> None:
    """verify and verify_standard, given each case at the document's now, decide what it expects."""
    case = CASES[case_id]
    assert verdict(scheme, case) == case["expected"][scheme]


def _library_signatures(case: dict[str, Any]) -> set[str]:
    headers = case["headers"]
    moment = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    return {
        Webhook(secret).sign(headers["webhook-id"], moment, case["body"])
        for secret in case["standardWebhooksSecrets"]
    }


@pytest.mark.parametrize(
    "case_id", [case_id for case_id, case in CASES.items() if case["expected"]["webhook-signature"]["accept"]]
)
def test_the_library_signs_what_every_accepted_case_carries(case_id: str) -> None:
    """For each accepted case, the standardwebhooks library, given standardWebhooksSecrets, writes a
    v1 value the webhook-signature header carries (the library's clock is not involved)."""
    case = CASES[case_id]
    assert _library_signatures(case) <= set(case["headers"]["webhook-signature"].split(" "))


def _reference_x_service(secret: str, timestamp: str, body: str) -> str:
    """x-service-signature's v1 value, from the standard library alone."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "case_id",
    [case_id for case_id, case in CASES.items() if case["expected"]["x-service-signature"]["accept"]],
)
def test_accepted_x_service_signatures_are_plain_hmac(case_id: str) -> None:
    """For each accepted case, plain HMAC-SHA256 of the secret's UTF-8 bytes gives a value the header carries."""
    case = CASES[case_id]
    headers = case["headers"]
    offered = headers["x-service-signature"].split(",")
    assert {
        _reference_x_service(secret, headers["x-service-timestamp"], case["body"]) for secret in case["secrets"]
    } <= set(offered)


def test_the_document_states_its_terms() -> None:
    """Kind, version, the instant to verify at, the tolerance, both schemes and the four reasons."""
    assert {key: DOCUMENT[key] for key in ("kind", "version", "publicApi", "now", "timestampTolerance")} == {
        "kind": "service.public.webhook-test-vectors",
        "version": "1.0",
        "publicApi": f"{BASE}/api/v1",
        "now": 1782820805,
        "timestampTolerance": 300,
    }
    assert (SIGNED_AT, NOW) == (1782820800, 1782820805)  # 2026-06-30T12:00:00Z and five seconds
    assert list(DOCUMENT["schemes"]) == ["x-service-signature", "webhook-signature"]
    assert list(DOCUMENT["reasons"]) == ["bad_signature", "stale_timestamp", "malformed_header", "missing_header"]


def test_the_cases_cover_every_kind_a_rotation_and_every_refusal() -> None:
    """One accepted delivery per event kind, both sides of a rotation, an earlier secret, refusals,
    then (appended) a batch and its tampering."""
    assert list(CASES) == [
        *(f"single/{kind}" for kind in EVENT_MODELS),
        "rotation/new-secret",
        "rotation/old-secret",
        "earlier-secret",
        "refused/tampered-body",
        "refused/tampered-id",
        "refused/tampered-timestamp",
        "refused/wrong-secret",
        "refused/stale-timestamp",
        "refused/future-timestamp",
        "refused/malformed-timestamp",
        "refused/unknown-version",
        "refused/missing-signature",
        "batch/room.trending",
        "refused/batch-reordered",
    ]
    reasons = {
        case["expected"][scheme]["reason"] for case in CASES.values() for scheme in VERIFIERS
    }
    assert reasons == {None, *REASONS}
    rotation = CASES["rotation/new-secret"]["headers"]
    assert rotation["x-service-signature"].count("v1=") == 2
    assert len(rotation["webhook-signature"].split(" ")) == 2
    assert CASES["rotation/old-secret"]["headers"] == rotation
    assert CASES["rotation/new-secret"]["secrets"] != CASES["rotation/old-secret"]["secrets"]


def test_each_single_delivery_has_its_own_id_in_the_service_format() -> None:
    """Delivery ids are dlv_ + a ULID, one per kind, and webhook-id repeats x-service-delivery."""
    singles = [case for case_id, case in CASES.items() if case_id.startswith("single/")]
    ids = [case["headers"]["x-service-delivery"] for case in singles]
    assert len(set(ids)) == len(EVENT_MODELS)
    assert all(re.fullmatch(r"dlv_[0-9A-HJKMNP-TV-Z]{26}", delivery_id) for delivery_id in ids)
    assert all(case["headers"]["webhook-id"] == case["headers"]["x-service-delivery"] for case in singles)


def test_secrets_are_in_the_issued_form_and_the_library_form() -> None:
    """Secrets are whsec_ + base64 of 32 bytes, given unchanged to libraries; the earlier secret is converted."""
    for case_id, case in CASES.items():
        if case_id == "earlier-secret":
            [secret] = case["secrets"]
            assert not secret.startswith("whsec_")
            assert case["standardWebhooksSecrets"] == ["whsec_" + base64.b64encode(secret.encode()).decode()]
            continue
        assert case["standardWebhooksSecrets"] == case["secrets"]
        for secret in case["secrets"]:
            assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_the_document_is_deterministic() -> None:
    """Two renderings are the same bytes, so its ETag is the same in every process and on every run."""
    assert json.dumps(vectors_document(BASE)) == json.dumps(DOCUMENT)


def test_published_cases_never_change() -> None:
    """The first cases are pinned: changing one breaks every partner test suite built on them; new
    cases go after them (or in a new version)."""
    published = json.dumps(DOCUMENT["cases"][:FIRST_CASES], sort_keys=True).encode()
    assert hashlib.sha256(published).hexdigest() == FIRST_CASES_SHA256


def test_the_route_serves_the_document_with_validators(make_client: Any) -> None:
    """GET /api/v1/webhooks/test-vectors is the document for this base_url, cached like the others."""
    with make_client(base_url=BASE) as client:
        response = client.get("/api/v1/webhooks/test-vectors")
        again = client.get("/api/v1/webhooks/test-vectors", headers={"if-none-match": response.headers["etag"]})
        head = client.head("/api/v1/webhooks/test-vectors")
    assert response.status_code == 200
    assert response.json == vectors_document(BASE)
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.headers["cache-control"] == "public, max-age=300"
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", response.headers["etag"])
    assert (head.status_code, head.content, head.headers["etag"]) == (200, b"", response.headers["etag"])


def test_the_index_sitemap_and_llms_name_the_vectors(make_client: Any) -> None:
    """/api/v1 links the vectors, the agent sitemap lists them, llms.txt points agents to them."""
    url = f"{BASE}/api/v1/webhooks/test-vectors"
    with make_client(base_url=BASE) as client:
        index = client.get("/api/v1").json
        sitemap = client.get("/agent-sitemap.xml").text
        llms = client.get("/llms.txt").text
    assert index["links"]["webhookTestVectors"] == url
    assert f"<loc>{url}</loc>" in sitemap
    assert f"]({url}):" in llms


def test_the_module_names_match_the_document() -> None:
    """The constants partners may import are the ones the document shows."""
    assert CASES["single/room.claimed"]["secrets"] == [vectors.SECRET]
    assert CASES["rotation/new-secret"]["secrets"] == [vectors.ROTATED_SECRET]
    assert CASES["refused/wrong-secret"]["secrets"] == [vectors.OTHER_SECRET]
    assert CASES["earlier-secret"]["secrets"] == [vectors.EARLIER_SECRET]


def test_the_batch_case_is_a_batch_body_of_exact_payloads() -> None:
    """The batch case validates against the catalog's batch schema, carries the kind's example first
    as the bytes its single case sends, and has a delivery id of its own."""
    from jsonschema import Draft202012Validator

    from service.discovery.catalog import catalog_document

    case = CASES["batch/room.trending"]
    body = json.loads(case["body"])
    Draft202012Validator(catalog_document(BASE)["batchDelivery"]["bodySchema"]).validate(body)
    assert case["delivery"] == "batch" and case["event"] == "room.trending" == body["event"]
    single = CASES["single/room.trending"]["body"]
    assert case["body"].startswith('{"event":"room.trending","batch":true,"events":[' + single + ",")
    ids = {c["headers"]["webhook-id"] for c in CASES.values() if c["id"].startswith(("single/", "batch/"))}
    assert len(ids) == len(EVENT_MODELS) + 1
    assert CASES["refused/batch-reordered"]["headers"] == case["headers"]
    assert {c["delivery"] for c in DOCUMENT["cases"][:FIRST_CASES]} == {"single"}
