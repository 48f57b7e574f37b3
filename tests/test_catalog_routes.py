"""The public API index and the catalog routes, over HTTP."""

from __future__ import annotations

import pytest

from service.discovery.catalog import catalog_document, event_document
from service.events import EVENT_MODELS

BASE = "https://rooms.example"
UNKNOWN = {"ok": False, "message": "No event kind with this id is in the catalog."}


def test_api_index_links_the_catalog_and_openapi(make_client):
    """GET /api/v1 is the index of the public API, every link absolute under base_url."""
    with make_client(base_url=BASE) as client:
        response = client.get("/api/v1")
    assert response.status_code == 200
    assert response.json == {
        "kind": "service.public.api-index",
        "publicApi": f"{BASE}/api/v1",
        "publicApiVersion": "2026-06-29",
        "interfaceVersion": "0.1.0",
        "links": {
            "self": f"{BASE}/api/v1",
            "webhookCatalog": f"{BASE}/api/v1/webhooks/events",
            "webhookTestVectors": f"{BASE}/api/v1/webhooks/test-vectors",
            "openapi": f"{BASE}/api/v1/openapi.json",
            "waitlist": f"{BASE}/api/waitlist",
            "agentManifest": f"{BASE}/agent.json",
            "llmsTxt": f"{BASE}/llms.txt",
            "partnerDocs": f"{BASE}/docs/webhooks/",
            "partnerEventCatalog": f"{BASE}/docs/webhooks/event-catalog",
            "partnerVerifyingSignatures": f"{BASE}/docs/webhooks/verifying-signatures",
        },
    }


def test_catalog_route_serves_the_catalog_document(make_client):
    """GET /api/v1/webhooks/events is the catalog document for this base_url, byte for byte in JSON."""
    with make_client(base_url=BASE) as client:
        response = client.get("/api/v1/webhooks/events")
    assert response.status_code == 200
    assert response.json == catalog_document(BASE)
    assert [entry["id"] for entry in response.json["events"]] == list(EVENT_MODELS)


@pytest.mark.parametrize("kind", list(EVENT_MODELS))
def test_event_route_serves_each_single_event_document(make_client, kind):
    """GET /api/v1/webhooks/events/{eventId} is that kind's schema document, linked from the catalog."""
    with make_client(base_url=BASE) as client:
        response = client.get(f"/api/v1/webhooks/events/{kind}")
        catalog = client.get("/api/v1/webhooks/events").json
    assert response.status_code == 200
    assert response.json == event_document(BASE, kind)
    entry = next(entry for entry in catalog["events"] if entry["id"] == kind)
    assert entry["schemaUrl"] == f"{BASE}/api/v1/webhooks/events/{kind}"
    assert response.json["event"] == entry


@pytest.mark.parametrize(
    "event_id",
    [
        "room.unknown",
        "ROOM.CLAIMED",
        "room.claimed.extra",
        "room_claimed",
        "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "room.claimed%00",
    ],
)
def test_unknown_event_id_is_404_in_the_error_shape(make_client, event_id):
    """An id the catalog does not list is 404 with the one error shape, echoing nothing back."""
    with make_client(base_url=BASE) as client:
        response = client.get(f"/api/v1/webhooks/events/{event_id}")
        head = client.head(f"/api/v1/webhooks/events/{event_id}")
    assert (response.status_code, response.json) == (404, UNKNOWN)
    assert (head.status_code, head.content) == (404, b"")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/webhooks/events",
        "/api/v1/webhooks/events/room.claimed",
        "/api/v1/webhooks/test-vectors",
        "/api/v1",
    ],
)
@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_catalog_routes_are_read_only(make_client, path, method):
    """The catalog routes answer only GET and HEAD; anything else is 405 in the error shape."""
    with make_client(base_url=BASE) as client:
        response = client.request(method, path)
    assert (response.status_code, response.json) == (
        405,
        {"ok": False, "message": "This method is not allowed here."},
    )


def test_the_catalog_states_this_deployments_timeout_and_schedule(make_client):
    """subscriptionModel.retry names SERVICE_WEBHOOK_TIMEOUT and SERVICE_WEBHOOK_RETRY_SCHEDULE as
    configured: partners build to it, so it must not promise 15 seconds when the worker waits 5."""
    with make_client(base_url=BASE, webhook_timeout=5, webhook_retry_schedule="1,2.5") as client:
        retry = client.get("/api/v1/webhooks/events").json["subscriptionModel"]["retry"]
    assert retry.startswith(
        "A 2xx answer within 5 seconds is success. Any other status, a timeout or a refused connection is "
        "retried after 1, 2.5 seconds (each ±20% jitter; "
    )
    assert "15 seconds" not in retry
    assert "36000" not in retry
    with make_client(base_url=BASE) as client:
        retry = client.get("/api/v1/webhooks/events").json["subscriptionModel"]["retry"]
    assert retry.startswith(
        "A 2xx answer within 15 seconds is success. Any other status, a timeout or a refused connection is "
        "retried after 5, 300, 1800, 7200, 18000, 36000, 36000 seconds (each ±20% jitter; "
    )
