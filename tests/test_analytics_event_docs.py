"""The partner's view of the catalog: derived from the models, and its signed examples verify."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analytics import event_docs
from service.discovery import vectors
from service.events import EVENT_MODELS, example_payload
from service.webhooks import signing


def test_overview_lists_every_kind_in_catalog_order() -> None:
    """One row per event model, in EVENT_MODELS order, with its dedupe key."""
    overview = event_docs.overview()
    assert list(overview["event"]) == list(EVENT_MODELS)
    assert overview.loc[1, "dedupeKey"] == "event.id + tier"


def test_common_fields() -> None:
    """The three members every event carries, all required."""
    common = event_docs.common_fields()
    assert list(common["name"]) == ["eventId", "event", "occurredAt"]
    assert common["required"].all()


@pytest.mark.parametrize("kind", list(EVENT_MODELS))
def test_signed_example_is_a_valid_delivery(kind: str) -> None:
    """The example body is the model's example on the wire, and both its signatures verify."""
    request = event_docs.signed_example(kind)
    assert json.loads(request.body) == example_payload(EVENT_MODELS[kind])
    sent_at = int(request.headers[signing.TIMESTAMP_HEADER])
    signing.verify(request.headers, request.body, event_docs.EXAMPLE_SECRET, now=sent_at)
    signing.verify_standard(request.headers, request.body, event_docs.EXAMPLE_SECRET, now=sent_at)
    assert request.headers[signing.EVENT_HEADER] == kind


def test_signed_examples_are_the_test_vectors_with_their_own_delivery_ids() -> None:
    """Each kind's example is its single/<kind> test vector, and no two share a delivery id."""
    cases = {case["id"]: case for case in vectors.vectors_document("https://x.example")["cases"]}
    ids = set()
    for kind in EVENT_MODELS:
        request = event_docs.signed_example(kind)
        case = cases[f"single/{kind}"]
        assert request.body.decode() == case["body"]
        assert {name: request.headers[name] for name in case["headers"]} == case["headers"]
        ids.add(request.headers[signing.DELIVERY_HEADER])
    assert len(ids) == len(EVENT_MODELS)


def test_signed_example_as_http() -> None:
    """The HTTP text starts with the request line and host, and ends with the raw body."""
    request = event_docs.signed_example("platform.milestone")
    lines = request.http("https://partner.example/hooks/in").split("\n")
    assert lines[:2] == ["POST /hooks/in HTTP/1.1", "Host: partner.example"]
    assert lines[-1] == request.body.decode()
    assert lines[-2] == ""


@pytest.mark.parametrize("kind", list(EVENT_MODELS))
def test_section_parts(kind: str) -> None:
    """Meaning, field table, example, folded schema and signed example, in that order."""
    intro, table, example, schema, signed = event_docs.section(kind)
    assert isinstance(table, pd.DataFrame)
    assert list(table["name"]) == list(EVENT_MODELS[kind].model_fields)
    assert isinstance(intro, str) and EVENT_MODELS[kind].SUMMARY in intro
    assert isinstance(example, str) and EVENT_MODELS[kind].EXAMPLE["eventId"] in example
    assert isinstance(schema, str) and schema.startswith("<details>")
    assert isinstance(signed, str) and "x-service-signature: v1=" in signed


def test_unknown_kind() -> None:
    """A kind the catalog does not list is named in the error."""
    with pytest.raises(KeyError, match=r"room\.deleted"):
        event_docs.fields("room.deleted")


def test_the_signed_batch_is_the_batch_vector_and_verifies() -> None:
    """The notebook's signed batch is the batch/room.trending test vector: both signatures verify, it
    validates against the catalog's batch schema, and its first member is the kind's single example."""
    from jsonschema import Draft202012Validator

    from service.discovery.catalog import batch_body_schema

    request = event_docs.signed_batch()
    case = {case["id"]: case for case in vectors.vectors_document("https://x.example")["cases"]}["batch/room.trending"]
    assert request.body.decode() == case["body"]
    assert {name: request.headers[name] for name in case["headers"]} == case["headers"]
    sent_at = int(request.headers[signing.TIMESTAMP_HEADER])
    signing.verify(request.headers, request.body, event_docs.EXAMPLE_SECRET, now=sent_at)
    signing.verify_standard(request.headers, request.body, event_docs.EXAMPLE_SECRET, now=sent_at)
    body = json.loads(request.body)
    Draft202012Validator(batch_body_schema()).validate(body)
    assert body["events"][0] == example_payload(EVENT_MODELS["room.trending"])
    assert request.headers[signing.EVENT_HEADER] == "room.trending"
    parts = event_docs.batch_section()
    assert "`room.trending`, `room.arcade.high_score`, `room.artwork.vote_milestone`" in parts[0]
    assert parts[-1].endswith(request.body.decode() + "\n```")


def test_display_in_full_shows_every_table_cell_whole() -> None:
    """After display_in_full(), the notebook's tables print whole: no cell cut with "..."."""
    with pd.option_context("display.max_colwidth", 50, "display.max_rows", 60):
        cut = event_docs.fields("room.claimed")._repr_html_()
        event_docs.display_in_full()
        whole = event_docs.fields("room.claimed")._repr_html_()
        overview = event_docs.overview()._repr_html_()
    assert "..." in cut
    assert "..." not in whole
    assert "string (one of: official_owner, community_claimed, nft_room, unclaimed_stub)" in whole
    assert "..." not in overview
