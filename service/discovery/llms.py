"""``/llms.txt`` (llmstxt.org) and ``/llms-full.txt``, rendered from the content and the models.

llms.txt is built as an ``LlmsIndex`` first and then written out, so a test can hold the file to
its structure: what the ``llms-txt`` parser reads back is exactly the index it was written from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from service.bodies import MAX_BODY_BYTES
from service.discovery.catalog import DELIVERY_MODEL, batch_delivery_entry, public_api
from service.discovery.catalog import signature as signature_object
from service.discovery.content import Content
from service.discovery.surfaces import (
    AGENT_JSON,
    AGENT_SITEMAP,
    API_INDEX,
    CATALOG,
    DOCUMENTS,
    LLMS_FULL_TXT,
    OPENAPI,
    ROBOTS,
    ROOM_SCHEMA,
    SITEMAP,
    TEST_VECTORS,
    WAITLIST_PATH,
    WELL_KNOWN_AGENT_JSON,
    event_schema_urls,
    url,
)
from service.events import EVENT_MODELS, dedupe_composition, example_payload, payload_fields
from service.model_schemas import json_schema
from service.partner_docs import PAGES, VERIFYING_SIGNATURES, page_url
from service.waitlist import WaitlistRequest, WaitlistResponse

INSTRUCTIONS_HEADING = "Instructions for AI agents"


@dataclass(frozen=True, slots=True)
class Link:
    title: str
    url: str
    notes: str


@dataclass(frozen=True, slots=True)
class LlmsIndex:
    title: str
    summary: str
    info: str
    sections: dict[str, list[Link]]


def _instructions(content: Content) -> str:
    items = "\n".join(f"- {line}" for line in content.instructions)
    return f"{INSTRUCTIONS_HEADING}:\n\n{items}"


def llms_index(content: Content, base_url: str) -> LlmsIndex:
    """The structure of llms.txt: what a room is, the instructions, then link lists."""
    info = "\n\n".join([*content.paragraphs, _instructions(content), content.attribution])
    docs = [
        Link(surface.title, url(base_url, surface.path), surface.notes)
        for surface in (LLMS_FULL_TXT, AGENT_JSON, ROOM_SCHEMA, API_INDEX, OPENAPI, CATALOG, TEST_VECTORS)
    ]
    pages = [Link(page.title, url(base_url, page.path), page.notes) for page in content.pages]
    events = [
        Link(kind, schema, EVENT_MODELS[kind].SUMMARY) for kind, schema in event_schema_urls(base_url).items()
    ]
    partner = [
        Link(
            page.title,
            page_url(base_url, page, markdown=True),
            f"{page.notes} HTML: {page_url(base_url, page)}",
        )
        for page in PAGES
    ]
    optional = [
        Link(surface.title, url(base_url, surface.path), surface.notes)
        for surface in (WELL_KNOWN_AGENT_JSON, SITEMAP, AGENT_SITEMAP, ROBOTS)
    ]
    return LlmsIndex(
        title=content.site_name,
        summary=content.summary,
        info=info,
        sections={
            "Docs": docs,
            "Pages": pages,
            "Partner documentation": partner,
            "Webhook events": events,
            "Optional": optional,  # llmstxt.org: links an agent may skip for a shorter context
        },
    )


def write_llms_index(index: LlmsIndex) -> str:
    parts = [f"# {index.title}", f"> {index.summary}", index.info]
    for name, links in index.sections.items():
        lines = "\n".join(f"- [{link.title}]({link.url}): {link.notes}" for link in links)
        parts.append(f"## {name}\n\n{lines}")
    return "\n\n".join(parts) + "\n"


def llms_txt(content: Content, base_url: str) -> bytes:
    return write_llms_index(llms_index(content, base_url)).encode("utf-8")


# --- llms-full.txt ------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _json_block(document: Any) -> str:
    return "```json\n" + json.dumps(document, indent=2, ensure_ascii=False) + "\n```"


def _type_of(prop: dict[str, Any]) -> str:
    branches = [branch for branch in prop.get("anyOf", ()) if branch != {"type": "null"}]
    if len(branches) == 1:  # optional members are omitted or null; the table says "Required: no"
        prop = {**prop, **branches[0]}
    if "enum" in prop:
        return "string (one of: " + ", ".join(prop["enum"]) + ")"
    if "const" in prop:
        return f"{json.dumps(prop['const'])}"
    kind = str(prop.get("type", "any"))
    if "format" in prop:
        kind += f" ({prop['format']})"
    return kind


def _constraints(prop: dict[str, Any]) -> str:
    notes = []
    if "maxLength" in prop:
        notes.append(f"at most {prop['maxLength']} characters")
    if "minLength" in prop:
        notes.append(f"at least {prop['minLength']} characters")
    return "; ".join(notes) or "-"


def model_fields_table(model: type[BaseModel]) -> str:
    """A field table of ``model`` read from its JSON Schema, so it cannot drift from validation."""
    schema = json_schema(model)
    required = set(schema.get("required", ()))
    rows: list[tuple[object, ...]] = [
        (
            f"`{name}`",
            _type_of(prop),
            "yes" if name in required else "no",
            _constraints(prop),
            prop.get("description", "-"),
        )
        for name, prop in schema["properties"].items()
    ]
    return _table(("Field", "Type", "Required", "Constraints", "Meaning"), rows)


def _header(content: Content) -> str:
    return "\n\n".join([f"# {content.site_name}", f"> {content.summary}", *content.paragraphs])


def _instructions_section(content: Content) -> str:
    items = "\n".join(f"- {line}" for line in content.instructions)
    return f"## {INSTRUCTIONS_HEADING}\n\n{items}\n- {content.attribution}"


def _boundaries_section(content: Content) -> str:
    items = "\n".join(f"- {line}" for line in content.safety)
    return f"## What the service is and is not\n\n{items}"


def _authority_section(content: Content) -> str:
    blocks = [
        f"### {label.label} (`{label.id}`)\n\n{label.meaning}\n\nHow to preserve it: {label.preserve}"
        for label in content.authority
    ]
    lead = (
        "Every room carries one authority label (the `authority` member of the room schema; the "
        "first four are also the `roomType` claim states of `room.claimed` events). Keep the "
        "label with every room fact you show."
    )
    return "\n\n".join(["## Authority labels", lead, *blocks])


def _room_types_section(content: Content, base_url: str) -> str:
    items = "\n".join(f"- `{entry.id}` ({entry.label}): {entry.meaning}" for entry in content.room_types)
    schema = url(base_url, ROOM_SCHEMA.path)
    return f"## Room types\n\nThe `roomType` of a room in the [room schema]({schema}):\n\n{items}"


def _pricing_section(content: Content) -> str:
    rows: list[tuple[object, ...]] = [
        (tier.tier or "-", tier.price or "-", tier.standard_price or "-", tier.best_for or "-")
        for tier in content.pricing
    ]
    return "## Pricing tiers\n\n" + _table(("Tier", "Price", "Standard price", "Best for"), rows)


def _guidance_section(content: Content) -> str:
    return f"## Attribution and caching\n\n{content.attribution}\n\n{content.caching}"


def _waitlist_section(base_url: str) -> str:
    endpoint = url(base_url, WAITLIST_PATH)
    error_shape = {
        "ok": False,
        "message": "The waitlist registration is not valid.",
        "errors": [{"field": "email", "code": "invalid_email", "message": "..."}],
    }
    return "\n\n".join(
        [
            "## Waitlist API",
            f"`POST {endpoint}` registers interest in claiming a room (`claim`), following rooms "
            "(`member`) or adding arcade (`arcade`). Send the body as `application/json` or "
            "`application/x-www-form-urlencoded`; no other members are accepted.",
            model_fields_table(WaitlistRequest),
            "A `200` answer means the registration is stored; a repeat registration gets the same "
            "answer. Body:",
            model_fields_table(WaitlistResponse),
            f"Errors: `400` (invalid email or payload), `413` (body over {MAX_BODY_BYTES // 1024} "
            "KiB), `415` (other content types), `429` (too many requests; `Retry-After` says how "
            "many seconds to wait), `503` (briefly unavailable, nothing stored; try again after "
            "`Retry-After`). Every error has this shape (`errors` only where fields are at "
            "fault):",
            _json_block(error_shape),
            f"The full description is the [OpenAPI document]({url(base_url, OPENAPI.path)}).",
        ]
    )


def _event_block(base_url: str, kind: str) -> str:
    model = EVENT_MODELS[kind]
    rows: list[tuple[object, ...]] = [
        (f"`{field['name']}`", field["type"], "yes" if field["required"] else "no", field["summary"])
        for field in payload_fields(model)
    ]
    return "\n\n".join(
        [
            f"### {kind}",
            model.SUMMARY,
            f"- Trigger: {model.TRIGGER}\n- Trust boundary: {model.TRUST_BOUNDARY}\n"
            f"- Dedupe key: {dedupe_composition(model)}\n"
            f"- Schema: {event_schema_urls(base_url)[kind]}",
            _table(("Field", "Type", "Required", "Meaning"), rows),
            "Example payload:",
            _json_block(example_payload(model)),
        ]
    )


def _events_section(base_url: str) -> str:
    catalog = url(base_url, CATALOG.path)
    lead = (
        f"{DELIVERY_MODEL} The [event catalog]({catalog}) lists every kind with its JSON Schema. "
        "Every payload carries `eventId`, `event` and `occurredAt`."
    )
    batching = "### Batched delivery\n\n" + batch_delivery_entry()["summary"]
    blocks = [_event_block(base_url, kind) for kind in EVENT_MODELS]
    return "\n\n".join(["## Webhook events", lead, *blocks, batching])


# A receiver's check of x-service-signature, written from the signature description; a test runs
# it against the signer.
VERIFY_SNIPPET = """\
import base64, hashlib, hmac, time

def verify(secret: str, headers: dict[str, str], raw_body: bytes, tolerance: int = 300) -> bool:
    headers = {name.lower(): value for name, value in headers.items()}
    timestamp = headers.get("x-service-timestamp", "").strip()
    if not (timestamp.isascii() and timestamp.isdigit()):
        return False
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + raw_body, hashlib.sha256)
    expected = base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()
    signatures = [part.strip() for part in headers.get("x-service-signature", "").split(",")]
    matched = any(hmac.compare_digest(f"v1={expected}", part) for part in signatures)
    return matched and abs(time.time() - int(timestamp)) <= tolerance"""

# The same check of webhook-signature with the Standard Webhooks library; a test runs it too.
STANDARD_SNIPPET = """\
from standardwebhooks import Webhook  # pip install standardwebhooks

# secret: as issued (whsec_...); raises WebhookVerificationError when the delivery is refused
event = Webhook(secret).verify(raw_body, headers)"""


def _words(name: str) -> str:
    """``signedPayload`` -> ``Signed payload``."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower()
    return spaced[:1].upper() + spaced[1:]


def _standard_webhooks_block(standard: dict[str, Any]) -> str:
    libraries = standard.get("libraries")
    library_rows = (
        "\n".join(f"- {language}: {package}" for language, package in libraries.items())
        if isinstance(libraries, dict)
        else ""
    )
    details = "\n".join(
        f"- {_words(name)}: {value}" for name, value in standard.items() if isinstance(value, str)
    )
    return "\n\n".join(
        [
            "### Standard Webhooks",
            "The webhook-* headers follow the Standard Webhooks specification, so its maintained "
            "libraries verify them:",
            details,
            "Libraries by language:",
            library_rows,
            "In Python, with the library:",
            "```python\n" + STANDARD_SNIPPET + "\n```",
        ]
    )


def _signature_section(base_url: str) -> str:
    signature = signature_object(base_url)
    headers = signature.get("headers")
    header_rows = (
        "\n".join(f"- `{name}`: {meaning}" for name, meaning in headers.items())
        if isinstance(headers, dict)
        else ""
    )
    details = "\n".join(
        f"- {_words(name)}: {value}"
        for name, value in signature.items()
        if name != "headers" and isinstance(value, str)
    )
    standard = signature.get("standardWebhooks")
    vectors = url(base_url, TEST_VECTORS.path)
    return "\n\n".join(
        [
            "## Verifying signatures",
            "The catalog is public and unsigned; deliveries to onboarded partners are signed twice, "
            "over the same body: `x-service-signature`, the service's own scheme, and "
            "`webhook-signature`, the Standard Webhooks scheme. Check either, or both.",
            details,
            "Headers on every delivery:",
            header_rows,
            f"Test vectors for any verifier, with the verdict in each scheme: {vectors}",
            "The whole guide, with a Python and a Node.js verifier to copy: "
            f"{page_url(base_url, VERIFYING_SIGNATURES)} (Markdown: "
            f"{page_url(base_url, VERIFYING_SIGNATURES, markdown=True)})",
            "`x-service-signature` in Python, with the standard library only:",
            "```python\n" + VERIFY_SNIPPET + "\n```",
            _standard_webhooks_block(standard if isinstance(standard, dict) else {}),
        ]
    )


def _documents_section(base_url: str) -> str:
    surfaces = [*DOCUMENTS, API_INDEX, OPENAPI, CATALOG, TEST_VECTORS]
    items = "\n".join(
        f"- [{surface.title}]({url(base_url, surface.path)}): {surface.notes}" for surface in surfaces
    )
    pages = "\n".join(
        f"- [{page.title}]({page_url(base_url, page)}) "
        f"(Markdown: {page_url(base_url, page, markdown=True)}): {page.notes}"
        for page in PAGES
    )
    return (
        f"## Discovery documents\n\nPublic API: {public_api(base_url)}\n\n{items}\n\n"
        f"## Partner documentation\n\n{pages}"
    )


def llms_full_txt(content: Content, base_url: str) -> bytes:
    sections = [
        _header(content),
        _instructions_section(content),
        _boundaries_section(content),
        _authority_section(content),
        _room_types_section(content, base_url),
        _pricing_section(content),
        _guidance_section(content),
        _waitlist_section(base_url),
        _events_section(base_url),
        _signature_section(base_url),
        _documents_section(base_url),
    ]
    return ("\n\n".join(sections) + "\n").encode("utf-8")
