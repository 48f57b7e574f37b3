"""Request framing the service refuses: what two HTTP parsers could read differently.

A proxy in front and the server behind it must agree where each request ends; where they could
disagree, a request can be smuggled inside another. Sanic is lenient in a few places, so the raw
head of every request is checked before Sanic acts on it (``service.connections.GuardedRequest``),
and a fault answers 400 and closes the connection (docs/architecture.md "Faults and slow
clients"):

- a header name that is not an RFC 9110 token (whitespace before the colon, as in
  ``Transfer-Encoding : chunked``, which Sanic would ignore and fall back to Content-Length);
- an obsolete continuation line (a line starting with a space or a tab);
- a bare CR or LF inside a line;
- a ``Content-Length`` that is not ASCII digits (Python's ``int`` reads ``٢`` as 2);
- more than one ``Content-Length``, or ``Content-Length`` beside ``Transfer-Encoding``;
- a ``Transfer-Encoding`` other than ``chunked`` (Sanic strips any Unicode whitespace before
  comparing, so ``\x0bchunked``, which a strict parser reads as an unknown coding, was chunked);
- a request line that is not a method of capital letters, ``-`` or ``_`` (as nginx holds them),
  one space, a target without whitespace or control bytes, one space and ``HTTP/1.x``: a bare CR
  or LF there, or a method in lower case (Sanic answered ``head`` as HEAD, without the body its
  ``Content-Length`` announced), is refused too.

What Sanic reads of a chunked body is not seen here (the CRLF after each chunk's data is not
checked), so a connection that carried a chunked body serves no further request: the shipped nginx
configuration sends bodies with a length and refuses malformed chunks before they get here.
"""

from __future__ import annotations

import re

# RFC 9110 section 5.6.2: every header line is a token, a colon and a value without CR or LF. The
# whole block is matched at once, which also refuses a continuation line (it starts with no token)
# and a bare CR or LF (neither can stand alone in a line): a clean head, nearly every one, costs one
# match and one scan for Content-Length, about 1 µs here against 4.2 for the five checks in turn
# (tests/test_framing.py holds the two to the same answers). A refused head is looked at again to
# say why.
_FIELDS = re.compile(rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*)*")
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)")
_CODING = re.compile(rb"\r\n(?i:transfer-encoding):[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)")
_REQUEST_LINE = re.compile(rb"[A-Z_-]+ [^\x00-\x20\x7f]+ HTTP/1\.[01]")


def framing_fault(head: bytes) -> str | None:
    """Why the request head (request line and header lines, CRLF-separated) is refused; None if
    it is not."""
    start = head.find(b"\r\n")
    if start == -1:
        start = len(head)  # a request line alone
    if not _REQUEST_LINE.fullmatch(head, 0, start):
        return "a request line that is not METHOD TARGET HTTP/1.x"
    fields = head[start:]
    if not _FIELDS.fullmatch(fields):
        return _malformed(fields)
    lowered = fields.lower()  # header names are case-insensitive; digits are unchanged
    chunked = b"\r\ntransfer-encoding:" in lowered
    if b"\r\ncontent-length:" in lowered:
        lengths = _LENGTH.findall(lowered)
        if any(not length.isdigit() for length in lengths):  # bytes.isdigit is ASCII only
            return "a Content-Length that is not ASCII digits"
        if len(lengths) > 1:
            return "more than one Content-Length"
        if chunked:
            return "both Content-Length and Transfer-Encoding"
    if chunked and any(coding != b"chunked" for coding in _CODING.findall(fields)):
        return "a Transfer-Encoding other than chunked"
    return None


def _malformed(fields: bytes) -> str:
    """What is wrong with header lines the block match refused."""
    if b"\r\n " in fields or b"\r\n\t" in fields:
        return "a header continuation line"
    crlf = fields.count(b"\r\n")
    if fields.count(b"\r") != crlf or fields.count(b"\n") != crlf:
        return "a bare CR or LF in a header line"
    return "a header name that is not a token"
