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

# RFC 9112 section 3 and RFC 9110 section 5.6.2: a request line, then header lines that are each a
# token, a colon and a value without CR or LF. The whole head is matched at once, which also
# refuses a continuation line (it starts with no token) and a bare CR or LF (neither can stand
# alone in a line), and then searched once for the two headers that frame a body: a clean head,
# nearly every one, costs that match and that search: 0.8 µs here for a two-line head and 4.0 for
# a browser's, no more than the header lines alone cost before the request line was checked, and
# against 4.2 for a two-line head checked rule by rule (tests/test_framing.py holds the two paths
# to the same answers). A refused head is looked at again to say why.
_TOKEN_LINES = rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*)*"
_REQUEST_LINE = rb"[A-Z_-]+ [^\x00-\x20\x7f]+ HTTP/1\.[01]"
_HEAD = re.compile(_REQUEST_LINE + _TOKEN_LINES)
_FIELDS = re.compile(_TOKEN_LINES)
_LINE = re.compile(_REQUEST_LINE)
_FRAMED = re.compile(rb"\r\n(?:content-length|transfer-encoding):")
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)")
_CODING = re.compile(rb"\r\n(?i:transfer-encoding):[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)")


def framing_fault(head: bytes) -> str | None:
    """Why the request head (request line and header lines, CRLF-separated) is refused; None if
    it is not."""
    if not _HEAD.fullmatch(head):
        return _malformed(head)
    lowered = head.lower()  # header names are case-insensitive; digits are unchanged
    if _FRAMED.search(lowered) is None:
        return None
    chunked = b"\r\ntransfer-encoding:" in lowered
    if b"\r\ncontent-length:" in lowered:
        lengths = _LENGTH.findall(lowered)
        if any(not length.isdigit() for length in lengths):  # bytes.isdigit is ASCII only
            return "a Content-Length that is not ASCII digits"
        if len(lengths) > 1:
            return "more than one Content-Length"
        if chunked:
            return "both Content-Length and Transfer-Encoding"
    if chunked and any(coding != b"chunked" for coding in _CODING.findall(head)):
        return "a Transfer-Encoding other than chunked"
    return None


# What makes a head still arriving (its blank line not yet in) one that ``framing_fault`` must refuse
# once whole: a first byte no method begins with (a TLS handshake, binary junk), a CR or LF
# standing alone (a CR at the very end may yet be followed by its LF), or a request line, once its
# CRLF is in, that is not METHOD TARGET HTTP/1.x (HTTP/0.9's ``GET /path``, ``HTTP/2.0``).
_METHOD_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_-")
_BARE = re.compile(rb"\r[^\n]|(?<!\r)\n")


def unfinished_fault(received: bytes) -> str | None:
    """Why a request head that has no blank line yet can never be accepted; None if it still may.

    Sanic waits for the CRLF CRLF that ends a head, and a client that ends its head with bare LFs,
    or speaks another protocol, never sends one: without this it would wait out its deadline for
    headers and have its connection closed with no answer. Refused as soon as it is certain, it
    is answered 400 like every other refused head."""
    if received and received[0] not in _METHOD_START:
        return "not an HTTP/1 request line"
    if _BARE.search(received):
        return "a bare CR or LF"
    end = received.find(b"\r\n")
    if end != -1 and not _LINE.fullmatch(received, 0, end):
        return "a request line that is not METHOD TARGET HTTP/1.x"
    return None


# RFC 3986's host (a registered name of unreserved, sub-delims and %-escapes, or a bracketed IP
# literal), then an optional port; empty is allowed, for a target with no authority (RFC 9112 3.2).
_HOST = re.compile(r"(?:\[[0-9A-Za-z:.]+\]|[0-9A-Za-z\-._~%!$&'()*+,;=]*)(?::[0-9]*)?")


def host_fault(version: str, hosts: list[str]) -> str | None:
    """Why the ``Host`` headers of a request of HTTP ``version`` (``1.1``, ``1.0``) are refused;
    None if they are not. RFC 9112 section 3.2: an HTTP/1.1 request has exactly one, an HTTP/1.0
    request one at most, and its value is a ``host[:port]``. With the headers' lookup, 0.75 µs
    a request here (a document costs about 30)."""
    if len(hosts) == 1:
        return None if _HOST.fullmatch(hosts[0].rstrip(" \t")) else "a Host that is not host[:port]"
    if len(hosts) > 1:
        return "more than one Host"
    return "an HTTP/1.1 request without a Host" if version == "1.1" else None


def _malformed(head: bytes) -> str:
    """What is wrong with a head the whole match refused."""
    start = head.find(b"\r\n")
    if start == -1:
        start = len(head)  # a request line alone
    if not _LINE.fullmatch(head, 0, start):
        return "a request line that is not METHOD TARGET HTTP/1.x"
    fields = head[start:]
    if b"\r\n " in fields or b"\r\n\t" in fields:
        return "a header continuation line"
    crlf = fields.count(b"\r\n")
    if fields.count(b"\r") != crlf or fields.count(b"\n") != crlf:
        return "a bare CR or LF in a header line"
    return "a header name that is not a token"
