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
- more than one ``Content-Length``, or ``Content-Length`` beside ``Transfer-Encoding``.

What Sanic reads of a chunked body is not seen here (the CRLF after each chunk's data is not
checked), so a connection that carried a chunked body serves no further request: the shipped nginx
configuration sends bodies with a length and refuses malformed chunks before they get here.
"""

from __future__ import annotations

import re

# RFC 9110 section 5.6.2: token = 1*tchar.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def framing_fault(head: bytes) -> str | None:
    """Why the request head (request line and header lines, CRLF-separated) is refused; None if
    it is not."""
    lengths = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        if line[:1] in (b" ", b"\t"):
            return "a header continuation line"
        if b"\r" in line or b"\n" in line:
            return "a bare CR or LF in a header line"
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            return "a header name that is not a token"
        name = name.lower()
        if name == b"content-length":
            lengths += 1
            digits = value.strip(b" \t")
            if not digits.isdigit():  # bytes.isdigit is ASCII only
                return "a Content-Length that is not ASCII digits"
        elif name == b"transfer-encoding":
            chunked = True
    if lengths > 1:
        return "more than one Content-Length"
    if lengths and chunked:
        return "both Content-Length and Transfer-Encoding"
    return None
