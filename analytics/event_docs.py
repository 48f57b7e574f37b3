"""The event catalog as a partner reads it: one section per event kind, and a signed example.

Everything comes from ``service.discovery.catalog.event_entry`` (itself derived from the event models) and
``service.discovery.vectors``, so the catalog notebook shows what the service serves and sends.
Each kind's signed example is that kind's ``single/<kind>`` case of the published test vectors
(its own delivery id, the vectors' secret and time): a partner's verifier must reproduce its
signatures exactly. The signed batch is the vectors' ``batch/room.trending`` case.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from service.discovery import vectors
from service.discovery.catalog import batch_delivery_entry, event_entry
from service.events import EVENT_MODELS, EventPayload, payload_fields
from service.webhooks.send import USER_AGENT

BASE_URL = "https://launchrooms.example"  # the platform's public address in every example
# Published with the test vectors, so it can never be a partner's secret.
EXAMPLE_SECRET = vectors.SECRET
EXAMPLE_ENDPOINT = "https://partner.example/webhooks/launchrooms"
COMMON_MEMBERS = ("eventId", "event", "occurredAt")


@dataclass(frozen=True)
class SignedRequest:
    """One delivery as it goes on the wire: the headers the service sets, and the raw body."""

    headers: dict[str, str]
    body: bytes

    def http(self, endpoint: str = EXAMPLE_ENDPOINT) -> str:
        """The request as HTTP/1.1 text (the body is UTF-8 JSON)."""
        rest = endpoint.partition("://")[2]
        host, _, path = rest.partition("/")
        lines = [f"POST /{path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        return "\n".join(lines) + "\n\n" + self.body.decode("utf-8")


# pandas cuts long cells with "..." (display.max_colwidth, 50 characters) and long tables at 60 rows;
# a reference page must show every word of every field.
FULL_TABLES = {"display.max_colwidth": None, "display.max_rows": None, "display.max_columns": None}


def display_in_full() -> None:
    """Let every table the notebook shows print whole: no cell, row or column cut."""
    for option, value in FULL_TABLES.items():
        pd.set_option(option, value)


def model(kind: str) -> type[EventPayload]:
    try:
        return EVENT_MODELS[kind]
    except KeyError:
        raise KeyError(f"no event kind {kind!r}; the catalog lists {', '.join(EVENT_MODELS)}") from None


def overview() -> pd.DataFrame:
    """Columns ``event, summary, dedupeKey``: every kind in the catalog, in the catalog's order."""
    entries = [event_entry(BASE_URL, model) for model in EVENT_MODELS.values()]
    return pd.DataFrame(
        {
            "event": [entry["id"] for entry in entries],
            "summary": [entry["summary"] for entry in entries],
            "dedupeKey": [entry["dedupeKey"] for entry in entries],
        }
    )


def fields(kind: str, *, common: bool = True) -> pd.DataFrame:
    """Columns ``name, type, required, summary``: the catalog's ``payloadFields`` for ``kind``."""
    rows = [row for row in payload_fields(model(kind)) if common or row["name"] not in COMMON_MEMBERS]
    return pd.DataFrame(rows, columns=["name", "type", "required", "summary"])


def common_fields() -> pd.DataFrame:
    """Columns ``name, type, required, summary``: the members every event carries."""
    first = next(iter(EVENT_MODELS))
    table = fields(first)
    return table[table["name"].isin(COMMON_MEMBERS)].reset_index(drop=True)


def signed_example(kind: str) -> SignedRequest:
    """The kind's example payload delivered as the service would: exact body bytes and headers.

    The test vectors' ``single/<kind>`` delivery (signed with ``EXAMPLE_SECRET`` at
    ``vectors.SIGNED_AT``), so it never changes while the model does not.
    """
    delivery = vectors.example_delivery(model(kind).KIND)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **delivery.headers}
    return SignedRequest(headers, delivery.body)


def section(kind: str) -> list[str | pd.DataFrame]:
    """The parts of one event's section, in reading order: Markdown text and the field table."""
    entry = event_entry(BASE_URL, model(kind))
    intro = "\n".join(
        [
            f"**Meaning.** {entry['summary']}",
            "",
            f"**Trigger.** {entry['trigger']}",
            "",
            f"**Trust boundary.** {entry['trustBoundary']}",
            "",
            f"**Dedupe key.** `{entry['dedupeKey']}` (delivery status: `{entry['deliveryStatus']}`; "
            f"schema at `{entry['schemaUrl']}`)",
            "",
            "**Payload members** (the common `eventId`, `event` and `occurredAt` first):",
        ]
    )
    signed = signed_example(kind)
    return [
        intro,
        fields(kind),
        "**Example payload:**\n\n" + _code("json", _pretty(entry["examplePayload"])),
        _details("JSON Schema (draft 2020-12)", _code("json", _pretty(entry["payloadSchema"]))),
        f"**The example as a signed delivery**: the test vectors' `single/{kind}` case, signed with "
        f"their secret `{EXAMPLE_SECRET}`. Your verifier should compute the same `v1=` value "
        "(`x-service-signature`) or `v1,` value (`webhook-signature`):\n\n" + _code("http", signed.http()),
    ]


def signed_batch() -> SignedRequest:
    """The catalog's example batch delivered as the service would: the test vectors'
    ``batch/room.trending`` case, one delivery id for the batch."""
    delivery = vectors.batch_delivery()
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **delivery.headers}
    return SignedRequest(headers, delivery.body)


def batch_section() -> list[str]:
    """The batched-delivery section: what a batch is, its body's schema, a signed batch."""
    entry = batch_delivery_entry()
    kinds = ", ".join(f"`{kind}`" for kind in entry["batchable"])
    signed = signed_batch()
    return [
        f"**Which kinds.** {kinds}, for partners whose subscription batches them. " + entry["summary"],
        _details(
            "JSON Schema of a batch's body (draft 2020-12)",
            _code("json", _pretty(entry["bodySchema"])),
        ),
        "**A signed batch**: the test vectors' `batch/room.trending` case, two events signed as one "
        f"body with their secret `{EXAMPLE_SECRET}`. Each member of `events` is byte for byte the "
        "payload that event would be sent alone:\n\n" + _code("http", signed.http()),
    ]


def show_batch() -> None:
    """Display ``batch_section()`` in a notebook."""
    from IPython.display import Markdown, display

    for part in batch_section():
        display(Markdown(part))  # type: ignore[no-untyped-call]


def show(kind: str) -> None:
    """Display ``section(kind)`` in a notebook: Markdown as Markdown, the table as a table."""
    from IPython.display import Markdown, display

    for part in section(kind):
        display(Markdown(part) if isinstance(part, str) else part)  # type: ignore[no-untyped-call]


def _pretty(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def _code(language: str, text: str) -> str:
    return f"```{language}\n{text}\n```"


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"
