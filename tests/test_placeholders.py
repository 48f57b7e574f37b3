"""No served document shows an unfilled template placeholder: discovery documents, /api/v1, the partner pages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from bs4 import BeautifulSoup

from service.discovery.surfaces import API_DOCUMENTS, DOCUMENTS, partner_page_urls
from service.events import EVENT_MODELS
from service.partner_docs import STYLESHEET
from service.webhooks.signing import signature_description

BASE = "https://rooms.example"
# Template syntax of every kind the project or its libraries could leave behind: str.format and
# f-strings without their f ({publicApi}), Jinja2 ({{ x }}, {% x %}), printf (%s, %(name)s),
# JavaScript template literals (${x}), and the partner pages' own token (@@SERVICE_BASE_URL@@).
_FORMAT_FIELD = re.compile(r"(?<![/$])\{[A-Za-z_][\w.-]*(?:![rsa])?(?::[^{}]*)?\}")
_OTHER = re.compile(r"\{\{|\}\}|\{%|%\}|\$\{[^}]*\}|%\([A-Za-z_]\w*\)[sdr]|(?<![%\w])%[sdr](?!\w)|@@")
# Brace text the documents carry on purpose: signed-payload formats, fields joined by dots
# ("{timestamp}.{raw_body}", "{webhook-id}.{webhook-timestamp}.{raw body}"). A URI template
# ("/events/{eventId}", RFC 6570) has its brace right after a slash, which _FORMAT_FIELD skips.
_SIGNED_PAYLOAD_FORMAT = re.compile(r"(?:\{[\w -]+\}\.)+\{[\w -]+\}")
_SIGNATURE = signature_description(test_vectors_url="-", guide_url="-")
_STANDARD = _SIGNATURE["standardWebhooks"]
assert isinstance(_STANDARD, dict)
# The formats the catalog publishes must be ones the detector lets through.
assert all(
    _SIGNED_PAYLOAD_FORMAT.fullmatch(str(found))
    for found in (_SIGNATURE["signedPayload"], _STANDARD["signedPayload"])
)
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def placeholders(text: str) -> list[str]:
    """Unfilled placeholders in prose (code is literal and may hold braces of its own)."""
    text = _SIGNED_PAYLOAD_FORMAT.sub("", text)
    return _FORMAT_FIELD.findall(text) + _OTHER.findall(text)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _prose_of_markdown(text: str) -> str:
    return _CODE_SPAN.sub("", _FENCED.sub("", text))


def _prose_of_html(text: str) -> str:
    soup = BeautifulSoup(text, "html.parser")
    for code in soup.find_all(["pre", "code"]):
        code.decompose()
    links = " ".join(str(tag.get(name, "")) for tag in soup.find_all(True) for name in ("href", "src"))
    return soup.get_text(" ") + " " + links


def unfilled(media_type: str, body: str) -> list[str]:
    """Placeholders of a served document, read as its media type says."""
    if media_type.startswith("application/json"):
        return [found for string in _strings(json.loads(body)) for found in placeholders(string)]
    if media_type.startswith("text/html"):
        return placeholders(_prose_of_html(body)) + re.findall(r"@@\w*@@", body)
    if media_type.startswith(("text/markdown", "text/plain")):
        return placeholders(_prose_of_markdown(body)) + re.findall(r"@@\w*@@", body)
    return placeholders(body)


def _served_paths() -> list[str]:
    paths = [surface.path for surface in (*DOCUMENTS, *API_DOCUMENTS)]
    paths += [f"/api/v1/webhooks/events/{kind}" for kind in EVENT_MODELS]
    paths += [url.removeprefix(BASE) for url in partner_page_urls(BASE)] + [STYLESHEET]
    return paths


@pytest.mark.parametrize(
    ("media_type", "text", "found"),
    [
        ("application/json", '{"a": "Test vectors: {publicApi}/webhooks/test-vectors."}', ["{publicApi}"]),
        ("text/plain", "Read {base_url}/llms.txt first", ["{base_url}"]),
        ("text/plain", "HMAC of '{webhook-id}.{webhook-timestamp}.{raw body}' keyed by {key}", ["{key}"]),
        ("text/plain", "Hello {{ name }}", ["{{", "}}"]),
        ("text/plain", "{% if x %}", ["{%", "%}"]),
        ("text/plain", "sent by %s to %(who)s", ["%(who)s", "%s"]),
        ("text/plain", "at ${base}/x", ["${base}"]),
        ("text/html", '<p><a href="@@SERVICE_BASE_URL@@/docs/">x</a></p>', ["@@", "@@", "@@SERVICE_BASE_URL@@"]),
        ("text/markdown", "Code `{kept}` and\n```js\nconst a = `${x}`;\n```\nbut {lost}", ["{lost}"]),
        ("application/json", '{"paths": {"/api/v1/webhooks/events/{eventId}": {}}}', []),
        ("application/json", '{"signedPayload": "{timestamp}.{raw_body}", "pattern": "^[0-9]{1,12}$"}', []),
        ("application/json", '{"example": {"score": 100, "share": "5%", "nested": [{"a": "{}"}]}}', []),
        ("text/html", "<pre>print(f'{name}')</pre><p>50% of {{</p>", ["{{"]),
    ],
)
def test_the_detector_finds_placeholders_and_passes_legitimate_text(media_type, text, found):
    """Unfilled str.format, Jinja, printf, template-literal and page tokens are found; JSON, URI templates and code are not."""
    assert sorted(unfilled(media_type, text)) == sorted(found)


def test_no_served_document_shows_an_unfilled_placeholder(make_client):
    """Every discovery document, /api/v1 document, event schema and partner page is free of placeholders."""
    with make_client(base_url=BASE) as client:
        found = {}
        for path in _served_paths():
            response = client.get(path)
            assert response.status_code == 200, path
            leftovers = unfilled(response.headers["content-type"], response.text)
            if leftovers:
                found[path] = leftovers
    assert found == {}
    assert len(_served_paths()) >= 26
