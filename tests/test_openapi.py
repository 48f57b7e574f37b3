"""/api/v1/openapi.json: a valid OpenAPI 3.1 document, derived from the models, true to the routes."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from pydantic.json_schema import models_json_schema

from service.events import EVENT_MODELS, example_payload
from service.waitlist import WaitlistRequest
from service.webhooks.batching import BATCHABLE

BASE = "https://rooms.example"
PUBLIC_PATHS = {
    "/api/waitlist",
    "/llms.txt",
    "/llms-full.txt",
    "/agent.json",
    "/.well-known/agent.json",
    "/room-schema.json",
    "/sitemap.xml",
    "/agent-sitemap.xml",
    "/robots.txt",
    "/api/v1",
    "/api/v1/openapi.json",
    "/api/v1/webhooks/events",
    "/api/v1/webhooks/events/{eventId}",
    "/api/v1/webhooks/test-vectors",
    "/healthz",
    "/readyz",
}


@pytest.fixture
def openapi(make_client):
    with make_client(base_url=BASE) as client:
        return client.get("/api/v1/openapi.json").json


def _validator(openapi: dict, name: str) -> Draft202012Validator:
    """A validator for one component schema, its $refs resolved inside the OpenAPI document."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": openapi["components"]}
    return Draft202012Validator(schema)


def test_openapi_document_is_valid_openapi_3_1(openapi):
    """openapi-spec-validator accepts the document as OpenAPI 3.1."""
    validate(openapi)
    assert openapi["openapi"] == "3.1.0"
    assert openapi["info"]["version"] == "0.1.0"
    assert openapi["servers"] == [{"url": BASE}]


def test_openapi_lists_the_public_routes_and_no_admin_route(openapi):
    """Every public route is described; nothing under /admin is."""
    assert set(openapi["paths"]) == PUBLIC_PATHS
    assert not [path for path in openapi["paths"] if path.startswith("/admin")]


def test_sitemap_documents_its_503_and_the_static_documents_none(openapi):
    """sitemap.xml reads its rooms from storage, and answers 503 (in the error shape) while storage
    is down before a first rendering; the other documents are rendered at start and never do. Each
    answers 412 to an If-Match naming another version."""
    responses = {path: set(item["get"]["responses"]) for path, item in openapi["paths"].items() if "get" in item}
    assert responses["/sitemap.xml"] == {"200", "304", "412", "503"}
    assert openapi["paths"]["/sitemap.xml"]["get"]["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert responses["/llms.txt"] == responses["/agent-sitemap.xml"] == {"200", "304", "412"}


def test_waitlist_request_schema_is_the_models_own(openapi):
    """The waitlist body schema is pydantic's schema of WaitlistRequest, for JSON and form bodies."""
    _, definitions = models_json_schema(
        [(WaitlistRequest, "validation")], ref_template="#/components/schemas/{model}"
    )
    assert openapi["components"]["schemas"]["WaitlistRequest"] == definitions["$defs"]["WaitlistRequest"]
    body = openapi["paths"]["/api/waitlist"]["post"]["requestBody"]
    assert body["required"] is True
    assert body["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/WaitlistRequest"}},
        "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/WaitlistRequest"}},
    }
    responses = openapi["paths"]["/api/waitlist"]["post"]["responses"]
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WaitlistResponse"
    }
    for status in ("400", "413", "415", "429"):
        assert responses[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }
    assert "Retry-After" in responses["429"]["headers"]


def test_no_schema_admits_a_null_the_service_never_sends(openapi):
    """Optional members are absent or a value, never null (the published types have none), so no
    component's property offers a null branch to generated clients; the one member sent as null
    is a test vector's reason for refusing, when a verifier accepts."""
    nullable = [
        f"{name}.{member}"
        for name, schema in openapi["components"]["schemas"].items()
        for member, prop in schema.get("properties", {}).items()
        if {"type": "null"} in prop.get("anyOf", []) or prop.get("type") == "null"
    ]
    assert nullable == ["Expectation.reason"]
    assert openapi["components"]["schemas"]["WaitlistResponse"]["properties"]["message"]["type"] == "string"


def test_webhooks_describe_every_event_kind(openapi):
    """OpenAPI webhooks carry one signed POST per event kind, its body the payload model's schema."""
    assert list(openapi["webhooks"]) == list(EVENT_MODELS)
    for kind, model in EVENT_MODELS.items():
        operation = openapi["webhooks"][kind]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        event = {"$ref": f"#/components/schemas/{model.__name__}"}
        assert body == ({"oneOf": [event, body["oneOf"][1]]} if kind in BATCHABLE else event)
        assert [parameter["name"] for parameter in operation["parameters"]] == [
            "x-service-event",
            "x-service-delivery",
            "x-service-timestamp",
            "x-service-signature",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
        ]
        schema = openapi["components"]["schemas"][model.__name__]
        assert schema["properties"]["event"]["const"] == kind
        # What each answer does: delivered, paused, or retried (the catalog's schedule).
        assert list(operation["responses"]) == ["2XX", "410", "default"]
        assert "subscriptionModel.retry" in operation["responses"]["default"]["description"]


@pytest.mark.parametrize("kind", BATCHABLE)
def test_a_batchable_kinds_webhook_takes_its_batches_as_well(openapi, kind):
    """A kind partners may batch is delivered as one event or as a batch of them: the webhook's
    body validates both (the catalog's own examples) and refuses a batch carrying another kind;
    it allowed the single event only, and a real batch failed it."""
    components = {"components": openapi["components"]}
    body = openapi["webhooks"][kind]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = Draft202012Validator({**body, **components})
    single = example_payload(EVENT_MODELS[kind])
    second = {**single, "eventId": "evt_01JZ8QN2P4Q6R8S0T2V4W6X8Y1"}
    assert not list(validator.iter_errors(single))
    assert not list(validator.iter_errors({"event": kind, "batch": True, "events": [single, second]}))
    other = next(model for name, model in EVENT_MODELS.items() if name != kind)
    mixed = {"event": kind, "batch": True, "events": [single, example_payload(other)]}
    assert list(validator.iter_errors(mixed))
    assert list(validator.iter_errors({"event": kind, "batch": True, "events": []}))


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("/agent.json", "AgentManifest"),
        ("/.well-known/agent.json", "AgentManifest"),
        ("/api/v1", "ApiIndex"),
        ("/api/v1/webhooks/events", "CatalogDocument"),
        ("/api/v1/webhooks/test-vectors", "WebhookVectors"),
        *((f"/api/v1/webhooks/events/{kind}", "EventSchemaDocument") for kind in EVENT_MODELS),
    ],
)
def test_served_documents_fit_their_openapi_schemas(make_client, openapi, path, component):
    """Each JSON document the service serves validates against the schema OpenAPI gives for it."""
    operation = openapi["paths"]["/api/v1/webhooks/events/{eventId}" if "events/" in path else path]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{component}"
    }
    with make_client(base_url=BASE) as client:
        document = client.get(path).json
    _validator(openapi, component).validate(document)


@pytest.mark.parametrize(
    ("request_options", "status"),
    [
        ({"json": {"email": "not-an-email", "intent": "claim"}}, 400),
        ({"json": {"email": "a@example.com", "intent": "claim", "extra": 1}}, 400),
        ({"content": b"<x/>", "headers": {"content-type": "application/xml"}}, 415),
        ({"content": b"{" + b" " * 70_000 + b"}", "headers": {"content-type": "application/json"}}, 413),
    ],
)
def test_waitlist_errors_fit_the_error_schema(make_client, openapi, request_options, status):
    """The waitlist's real error answers validate against the Error schema OpenAPI declares."""
    with make_client(base_url=BASE) as client:
        response = client.post("/api/waitlist", **request_options)
    assert response.status_code == status
    _validator(openapi, "Error").validate(response.json)


def test_unknown_event_404_fits_the_error_schema(make_client, openapi):
    """The catalog's 404 answer validates against the Error schema OpenAPI declares for it."""
    operation = openapi["paths"]["/api/v1/webhooks/events/{eventId}"]["get"]
    assert operation["responses"]["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    with make_client(base_url=BASE) as client:
        response = client.get("/api/v1/webhooks/events/room.unknown")
    _validator(openapi, "Error").validate(response.json)
