"""Serving rendered documents: bytes, strong ETag and headers computed once, 304 on a match of
If-None-Match, 412 when If-Match names another version.

A request costs two header lookups and a string compare; everything else (body, ETag, the encoded
validator lines) was decided when the document was rendered. HEAD needs nothing here: Sanic sends
the GET headers (Content-Length included) without the body.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from sanic import HTTPResponse, Request

from service.errors import PreconditionFailed

# docs/architecture.md "Discovery documents": clients cache catalog and discovery responses. Five
# minutes keeps crawlers and agents cheap to serve while a content change (a restart) reaches them
# within minutes.
MAX_AGE = 300
CACHE_CONTROL = f"public, max-age={MAX_AGE}"


def strong_etag(body: bytes) -> str:
    """A quoted digest of the bytes: equal bodies, equal tags, across processes and restarts."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


Encoded = tuple[tuple[bytes, bytes], ...]

# What Sanic strips from header values it sends (CR, LF, NUL): here refused, once, at render time.
_NOT_IN_A_HEADER = frozenset("\r\n\x00")


def _encode(headers: dict[str, str]) -> Encoded:
    """Header lines as Sanic writes them; names lower-case, as HTTP/2 and HTTP/3 require."""
    for name, value in headers.items():
        if not (name + value).isascii() or not _NOT_IN_A_HEADER.isdisjoint(name + value):
            raise ValueError(f"header {name} must be one line of ASCII")
    return tuple((name.lower().encode("ascii"), value.encode("ascii")) for name, value in headers.items())


class DocumentResponse(HTTPResponse):
    """An ``HTTPResponse`` whose validators were encoded once, when the document was rendered.

    Sanic encodes (and, since 25.12.1, sanitises) every header of every response in its public
    ``processed_headers``, about a microsecond per header. A cached document's validators never
    change, so they are kept as encoded lines (``fixed_headers``), checked once by ``_encode``,
    and put in front of what Sanic's own ``processed_headers`` yields for the rest: the content
    type (as for any response given one) and whatever Sanic or a middleware adds per response.
    The fixed headers are not in ``self.headers``: a middleware must not set them again.
    """

    __slots__ = ("fixed_headers",)

    def __init__(
        self, body: bytes | None, status: int, content_type: str | None, fixed_headers: Encoded
    ) -> None:
        super().__init__(body, status, content_type=content_type)
        self.fixed_headers = fixed_headers

    @property
    def processed_headers(self) -> Iterator[tuple[bytes, bytes]]:
        return chain(self.fixed_headers, super().processed_headers)


@dataclass(frozen=True, slots=True)
class CachedDocument:
    body: bytes
    media_type: str
    etag: str
    headers: Encoded  # sent with 200 (and HEAD) besides the content type
    not_modified_headers: Encoded  # sent with 304: RFC 9110 15.4.5 repeats ETag and Cache-Control


def cached(
    body: bytes,
    media_type: str,
    cache_control: str = CACHE_CONTROL,
    extra_headers: dict[str, str] | None = None,
) -> CachedDocument:
    """``body`` ready to serve; ``extra_headers`` go with 200 and HEAD (a page's CSP, say)."""
    etag = strong_etag(body)
    validators = {"ETag": etag, "Cache-Control": cache_control}
    _encode({"Content-Type": media_type})  # Sanic sends it; refused here, at render time, if unsendable
    return CachedDocument(
        body=body,
        media_type=media_type,
        etag=etag,
        headers=_encode({**validators, "X-Content-Type-Options": "nosniff", **(extra_headers or {})}),
        not_modified_headers=_encode(validators),
    )


def json_bytes(document: Any) -> bytes:
    """Indented UTF-8 JSON: read by people and agents as often as by parsers."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 13.1.2: a list of tags or ``*``, compared weakly (``W/"x"`` matches ``"x"``)."""
    if if_none_match == etag:
        return True
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def etag_matches_strongly(if_match: str, etag: str) -> bool:
    """RFC 9110 13.1.1: a list of tags or ``*``, compared strongly (a weak ``W/"x"`` matches none)."""
    return any(tag.strip() in ("*", etag) for tag in if_match.split(","))


def respond(request: Request, document: CachedDocument) -> HTTPResponse:
    # All the field's lines: a list split over several lines is the one list (RFC 9110 5.3). Without
    # the headers this costs what ``get`` does, a scan each finding nothing. If-Match first (RFC 9110
    # 13.2.2): a client that holds another version asked for this one only if it is still theirs.
    if_match = request.headers.getall("if-match", None)
    if if_match is not None and not etag_matches_strongly(",".join(if_match), document.etag):
        raise PreconditionFailed()
    if_none_match = request.headers.getall("if-none-match", None)
    if if_none_match is not None and etag_matches(",".join(if_none_match), document.etag):
        return DocumentResponse(None, 304, None, document.not_modified_headers)
    return DocumentResponse(document.body, 200, document.media_type, document.headers)
