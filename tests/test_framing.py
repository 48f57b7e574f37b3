"""Request framing two parsers could read differently is refused: 400 and the connection closed,
or the connection closed before a second request is read. Sent raw, over a socket, to the real
server (``python -m service serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.db.engine import migrate
from service.framing import framing_fault, host_fault, unfinished_fault
from tests.processes import free_port, start_server, stop

# A second request after the first: if it is ever answered, it was smuggled.
SMUGGLED = b"GET /api/v1/webhooks/events HTTP/1.1\r\nHost: x\r\n\r\n"
JSON = b"Content-Type: application/json\r\n"
BODY = b'{"email":"a@example.com","intent":"claim"}'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The server's port and the file its log lines go to."""
    folder: Path = tmp_path_factory.mktemp("framing")
    url = f"sqlite:///{folder / 'service.db'}"
    migrate(url)
    port, log = free_port(), folder / "serve.log"
    settings = {"SERVICE_DATABASE_URL": url, "SERVICE_WAITLIST_RATE_LIMIT": "1000/minute"}
    process = start_server(port, settings, log=log)
    try:
        yield port, log
    finally:
        stop(process)


@pytest.fixture
def port(served: tuple[int, Path]) -> int:
    return served[0]


def exchange(port: int, raw: bytes) -> list[tuple[int, dict[str, str]]]:
    """Send ``raw`` and read until the server closes: each response's status and headers."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pytest.fail("the connection stayed open after a refused or final request")
    responses = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = int(headers.get("content-length", "0"))
        responses.append((int(status_line.split(" ")[1]), headers))
        received = rest[length:]
    return responses


def refused(responses: list[tuple[int, dict[str, str]]]) -> bool:
    """Only a 400 that closes the connection came back: the smuggled request was never answered."""
    return [status for status, _ in responses] == [400] and responses[0][1].get("connection") == "close"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
            + b"Transfer-Encoding : chunked\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY,
            id="space-before-colon",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
            + b"X-Note: a\r\n Transfer-Encoding: chunked\r\nContent-Length: " + str(len(BODY)).encode()
            + b"\r\n\r\n" + BODY,
            id="continuation-line",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + "Content-Length: ٢".encode() + b"\r\n\r\n{}",
            id="non-ascii-digit-length",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: 2\r\nContent-Length: 44\r\n\r\n{}",
            id="conflicting-lengths",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            id="repeated-lengths",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
            + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            id="length-and-chunked",
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Transfer-Encoding: \x0bchunked\r\n\r\n"
            + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n",
            id="chunked-after-a-vertical-tab",  # Sanic strips any Unicode space; a strict parser none
        ),
        pytest.param(b"GE\nT /healthz HTTP/1.1\r\nHost: x\r\n\r\n", id="bare-lf-in-the-method"),
        pytest.param(b"head /healthz HTTP/1.1\r\nHost: x\r\n\r\n", id="lower-case-method"),
        pytest.param(b"GET /healthz HTTP/1.1\r\n\r\n", id="no-host"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", id="two-hosts"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x/y\r\n\r\n", id="host-with-a-path"),
    ],
)
def test_malformed_framing_is_400_and_closes_the_connection(port: int, raw: bytes) -> None:
    """Each form is answered 400 with Connection: close; the request after it is never read."""
    assert refused(exchange(port, raw + SMUGGLED))


def test_a_chunk_without_its_crlf_lets_no_second_request_through(port: int) -> None:
    """Chunk data not followed by CRLF: whatever the first request's answer, the bytes after it are
    never served as a request of their own."""
    chunked = b"5\r\n{}   XX0\r\n\r\n"  # 5 bytes of data, then "XX" where the CRLF belongs
    raw = b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Transfer-Encoding: chunked\r\n\r\n" + chunked
    responses = exchange(port, raw + SMUGGLED)  # reads until the server closes the connection
    assert len(responses) <= 2
    assert all(status != 200 for status, _ in responses[1:]), responses
    if len(responses) == 2:  # the bytes after the body were read as a request: refused
        assert refused(responses[1:])


def test_a_chunked_request_is_answered_with_connection_close(port: int) -> None:
    """No request may follow a chunked one on its connection: the answer says so and the
    connection ends, so a client never sends a correct request only to have it refused."""
    chunked = b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"
    raw = b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Transfer-Encoding: chunked\r\n\r\n" + chunked
    [(status, headers)] = exchange(port, raw)  # read until the server closes the connection
    assert (status, headers["connection"]) == (200, "close")


def test_well_formed_requests_share_a_connection(port: int) -> None:
    """The checks refuse nothing well formed: two requests on one connection, both answered."""
    first = b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert [status for status, _ in exchange(port, first + last)] == [200, 200]


def test_an_http_1_0_request_may_leave_host_out(port: int) -> None:
    """RFC 9112 asks a Host of HTTP/1.1 requests only: an HTTP/1.0 client without one is served."""
    [(status, headers)] = exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert (status, headers["connection"]) == (200, "close")


def continue_then_answer(port: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
    """Send ``head`` and read what comes back before any body is sent; send ``body`` if that was
    ``100 Continue``, then read to the end. What came first, and the rest."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        first = sock.recv(65536)
        if first.startswith(b"HTTP/1.1 100 "):
            sock.sendall(body)
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    return first, rest


EXPECTING = b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + JSON


def test_a_body_over_the_limit_is_refused_before_100_continue(port: int) -> None:
    """A client that waits for 100 Continue before sending a body over the limit is told 413 at
    once, never to go on: it would only send the body to have it thrown away."""
    head = EXPECTING + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % FAR_OVER
    first, rest = continue_then_answer(port, head, b"a" * FAR_OVER)
    assert first.startswith(b"HTTP/1.1 413 "), first[:40]
    answer_head, _, body = (first + rest).partition(b"\r\n\r\n")
    assert b"connection: close" in answer_head.lower()
    assert json.loads(body) == {"ok": False, "message": "The request body is too large."}


def test_a_body_within_the_limit_gets_100_continue_and_is_read(port: int) -> None:
    """Within the limit, the client is told to go on, and its body is read and answered."""
    head = EXPECTING + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    first, rest = continue_then_answer(port, head, BODY)
    assert first.startswith(b"HTTP/1.1 100 "), first[:40]
    assert rest.startswith(b"HTTP/1.1 200 "), rest[:40]


def test_an_expectation_other_than_100_continue_is_417(port: int) -> None:
    """An Expect the service does not meet is 417, with the service's own sentence."""
    head = EXPECTING + b"Expect: 200-ok\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    first, rest = continue_then_answer(port, head, BODY)
    assert first.startswith(b"HTTP/1.1 417 "), first[:40]
    body = (first + rest).partition(b"\r\n\r\n")[2]
    assert json.loads(body) == {"ok": False, "message": "The service meets no Expect but 100-continue."}


# Request targets the URL parser refuses: a path without its leading slash, a bare query, and
# control bytes in the query.
BAD_TARGETS = [
    b"healthz",
    b"?a",
    b"/healthz?\x00",
    b"/healthz?\x7f",
    b"http://evil",  # absolute form without a path: httptools reads none (a plain-text 500 before)
    b"http://evil?x=1",
    b"https://evil:443",
]


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_request_target_that_is_no_url_is_400(port: int, target: bytes) -> None:
    """A request line whose target cannot be parsed is answered 400 and the connection closed, as
    any other request the server cannot read: never a connection dropped without an answer."""
    assert refused(exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n" + SMUGGLED))


OVER_THE_LIMIT = 10_000  # past Sanic's 8 KiB limit on a request's head


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * OVER_THE_LIMIT + b"\r\n\r\n",
            431,
            "The request headers are too large.",
            id="one-big-header",
        ),
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Many: a\r\n" * (OVER_THE_LIMIT // 11) + b"\r\n",
            431,
            "The request headers are too large.",
            id="many-headers",
        ),
        pytest.param(
            b"GET /healthz?" + b"a" * OVER_THE_LIMIT + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            414,
            "The request target is too long.",
            id="long-target",
        ),
    ],
)
def test_a_request_head_over_the_limit_is_431_or_414(port: int, raw: bytes, status: int, message: str) -> None:
    """Headers too large to read are 431 Request Header Fields Too Large; a request line too
    large to read, 414 URI Too Long (RFC 9112 section 3). Each with the service's own sentence,
    never 413, which says the body is too large."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert json.loads(body) == {"ok": False, "message": message}


FAR_OVER = 1_000_000


async def answer_while_sending(port: int, raw: bytes) -> bytes:
    """Write all of ``raw`` while reading the answer to the end, as an HTTP client does; a reset
    fails the test."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    sending = asyncio.create_task(writer.drain())
    received = b""
    try:
        while chunk := await reader.read(65536):
            received += chunk
    except ConnectionResetError:
        pytest.fail(f"the connection was reset after {received[:12]!r}")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await sending
    return received


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * FAR_OVER + b"\r\n\r\n", 431, id="head"
        ),
        pytest.param(
            b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % FAR_OVER
            + b"a" * FAR_OVER,
            413,
            id="body",
        ),
    ],
)
async def test_a_client_refused_mid_send_reads_its_answer(port: int, raw: bytes, status: int) -> None:
    """Refused long before it has sent everything, a client gets its answer and the end of the
    connection, not a reset that could overtake the answer (a lingering close), each time."""
    for _ in range(5):
        received = await answer_while_sending(port, raw)
        assert received.startswith(b"HTTP/1.1 %d " % status), received[:40]
        assert b"connection: close" in received.partition(b"\r\n\r\n")[0].lower()


UNREAD = [
    pytest.param(b"PUT /agent.json", 405, id="method-not-allowed"),
    pytest.param(b"POST /nothing-here", 404, id="not-found"),
    pytest.param(b"GET /healthz", 200, id="a-route-that-reads-no-body"),
]
LAST = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize(("line", "status"), UNREAD)
async def test_an_answer_to_a_body_over_the_limit_that_was_not_read_says_close(
    port: int, line: bytes, status: int
) -> None:
    """A route may answer before it reads a body (a 404, a 405, a GET); a body over the limit is
    then never read to its end, and the connection cannot carry another request. Its answer says
    so (Connection: close) and the next request is not taken, so a client that keeps connections
    alive never sends one on a connection about to close."""
    size = 100_000  # over the 64 KiB limit
    raw = line + b" HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % size + b"a" * size
    received = await answer_while_sending(port, raw + LAST)
    head, _, rest = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head[:40]
    assert b"connection: close" in head.lower()
    assert b"HTTP/1.1" not in rest  # the request after it was never answered


@pytest.mark.parametrize(("line", "status"), UNREAD)
def test_a_body_within_the_limit_that_was_not_read_keeps_the_connection(
    port: int, line: bytes, status: int
) -> None:
    """Within the limit the unread body is skipped, and the connection serves the next request."""
    raw = line + b" HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    answers = exchange(port, raw + LAST)
    assert [(answered, headers["connection"]) for answered, headers in answers] == [
        (status, "keep-alive"),
        (200, "close"),
    ]


def test_refused_framing_writes_no_error_line(served: tuple[int, Path]) -> None:
    """Every refusal above is the client's fault: the server's log holds no ERROR line."""
    port, log = served
    exchange(port, b"GET / HTTP/1.1\r\nHost : x\r\n\r\n")
    for target in BAD_TARGETS:
        exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    # A body on a GET, which the route never reads: answered, and noted at INFO only.
    answered = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
    assert [status for status, _ in answered] == [200]
    errors = [line for line in log.read_text().splitlines() if '"level": "error"' in line]
    assert errors == []


@pytest.mark.parametrize(
    ("head", "fault"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 12", None),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length:  7 ", None),
        (b"GET / HTTP/1.1\r\nHost : x", "a header name that is not a token"),
        (b"GET / HTTP/1.1\r\nHost:\tx\r\n\tmore", "a header continuation line"),
        (b"GET / HTTP/1.1\r\nA: b\nTransfer-Encoding: chunked", "a bare CR or LF in a header line"),
        (b"GET / HTTP/1.1\r\nno colon here", "a header name that is not a token"),
        (b"GET / HTTP/1.1\r\nContent-Length: +2", "a Content-Length that is not ASCII digits"),
        (b"GET / HTTP/1.1\r\nContent-Length: 1_0", "a Content-Length that is not ASCII digits"),
        (b"GET / HTTP/1.1\r\nContent-Length: 2, 2", "a Content-Length that is not ASCII digits"),
        (b"GET / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2", "more than one Content-Length"),
        (b"GET / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked", "both Content-Length and Transfer-Encoding"),
        (b"GET / HTTP/1.1\r\ntransfer-encoding:chunked\r\nCONTENT-LENGTH:2", "both Content-Length and Transfer-Encoding"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked", None),
        (b"GET / HTTP/1.1\r\ncontent-length:\t3\t", None),
        (b"GET / HTTP/1.1\r\nX-Content-Length: x\r\nX-Transfer-Encoding: y", None),
        (b"GET / HTTP/1.1\r\nHost: x\r\n", "a header name that is not a token"),
        (b"GE\nT / HTTP/1.1\r\nHost: x", "a request line that is not METHOD TARGET HTTP/1.x"),
        (b"head / HTTP/1.1\r\nHost: x", "a request line that is not METHOD TARGET HTTP/1.x"),
        (b"G\xe9T / HTTP/1.1", "a request line that is not METHOD TARGET HTTP/1.x"),
        (b"M-SEARCH * HTTP/1.1\r\nHost: x", None),
        (b"GET http://x/a HTTP/1.0", None),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: \x0bchunked", "a Transfer-Encoding other than chunked"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding:\xc2\xa0chunked", "a Transfer-Encoding other than chunked"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", "a Transfer-Encoding other than chunked"),
        (b"POST / HTTP/1.1\r\nTRANSFER-ENCODING: Chunked", "a Transfer-Encoding other than chunked"),
        (b"POST / HTTP/1.1\r\ntransfer-encoding:\tchunked\t", None),
    ],
)
def test_framing_fault(head: bytes, fault: str | None) -> None:
    """The raw head is held to RFC 9110's framing, naming what is wrong."""
    assert framing_fault(head) == fault


@pytest.mark.parametrize(
    ("received", "fault"),
    [
        (b"", None),
        (b"G", None),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r", None),  # its LF may be in the next read
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", None),
        (b"M-SEARCH * HTTP/1.1\r\n", None),
        (b"GET /healthz HTTP/1.1\nHost: x\n\n", "a bare CR or LF"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\rX-Y: z", "a bare CR or LF"),
        (b"\n", "not an HTTP/1 request line"),
        (b"\r\nGET / HTTP/1.1", "not an HTTP/1 request line"),
        (b"get / HTTP/1.1", "not an HTTP/1 request line"),
        (b"\x16\x03\x01\x02\x00\x01", "not an HTTP/1 request line"),  # a TLS ClientHello
        (b"GET /api/waitlist\r\n", "a request line that is not METHOD TARGET HTTP/1.x"),  # HTTP/0.9
        (b"GET /api/waitlist HTTP/2.0\r\nHost: x\r\n", "a request line that is not METHOD TARGET HTTP/1.x"),
        (b"GET /api/waitlist HTTP/1.1", None),  # its CRLF may be in the next read
    ],
)
def test_unfinished_fault(received: bytes, fault: str | None) -> None:
    """A head still arriving is refused as soon as no byte to come could make it acceptable."""
    assert unfinished_fault(received) == fault


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_a_head_refused_unfinished_is_refused_once_whole(received: bytes) -> None:
    """Nothing refused early would have been accepted had its client ended it properly."""
    if b"\r\n\r\n" not in received and unfinished_fault(received) is not None:
        assert framing_fault(received + b"\r\nHost: x") is not None


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n", id="ended-by-bare-lfs"),
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\nAccept: */*", id="a-bare-lf-midway"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="tls-client-hello"),
        pytest.param(b"GET /api/waitlist\r\n", id="http-0.9"),
        pytest.param(b"POST /api/waitlist HTTP/2.0\r\nHost: x\r\n", id="another-version"),
    ],
)
def test_a_head_that_can_never_end_well_is_400_at_once(port: int, raw: bytes) -> None:
    """Refused when it arrives, not closed without an answer at the deadline for headers (10 s;
    ``exchange`` gives up after 5)."""
    assert refused(exchange(port, raw))


@pytest.mark.parametrize(
    ("version", "hosts", "fault"),
    [
        ("1.1", ["example.com"], None),
        ("1.1", ["example.com:8080"], None),
        ("1.1", ["[::1]:80"], None),
        ("1.1", ["x "], None),  # a field value's trailing whitespace is not part of it
        ("1.1", [""], None),  # a target with no authority (RFC 9112 section 3.2)
        ("1.0", [], None),
        ("1.0", ["x"], None),
        ("1.1", [], "an HTTP/1.1 request without a Host"),
        ("1.1", ["x", "x"], "more than one Host"),
        ("1.0", ["x", "y"], "more than one Host"),
        ("1.1", ["x/y"], "a Host that is not host[:port]"),
        ("1.1", ["user@x"], "a Host that is not host[:port]"),
        ("1.1", ["x y"], "a Host that is not host[:port]"),
        ("1.1", ["x:8o"], "a Host that is not host[:port]"),
        ("1.1", ["\u00e9.example"], "a Host that is not host[:port]"),
    ],
)
def test_host_fault(version: str, hosts: list[str], fault: str | None) -> None:
    """One Host of host[:port], and none only in HTTP/1.0 (RFC 9112 section 3.2)."""
    assert host_fault(version, hosts) == fault


# The five checks one after another, as the service first made them: framing_fault takes a faster
# path through the same rules, and must come to the same answer on every head.
_TOKEN_LINES = re.compile(rb"(?:\r\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*)*")
_ANY_CASE_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)", re.IGNORECASE)


_METHOD = re.compile(rb"[A-Z_-]+")
_CODINGS = re.compile(rb"\r\ntransfer-encoding:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n|$)", re.IGNORECASE)


def check_in_turn(head: bytes) -> str | None:
    start = head.find(b"\r\n")
    line = head if start == -1 else head[:start]
    parts = line.split(b" ")
    if (
        len(parts) != 3
        or not _METHOD.fullmatch(parts[0])
        or not parts[1]
        or any(byte <= 0x20 or byte == 0x7F for byte in parts[1])
        or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1")
    ):
        return "a request line that is not METHOD TARGET HTTP/1.x"
    if start == -1:
        return None
    fields = head[start:]
    if b"\r\n " in fields or b"\r\n\t" in fields:
        return "a header continuation line"
    crlf = fields.count(b"\r\n")
    if fields.count(b"\r") != crlf or fields.count(b"\n") != crlf:
        return "a bare CR or LF in a header line"
    if not _TOKEN_LINES.fullmatch(fields):
        return "a header name that is not a token"
    lengths = _ANY_CASE_LENGTH.findall(fields)
    if any(not length.isdigit() for length in lengths):
        return "a Content-Length that is not ASCII digits"
    if len(lengths) > 1:
        return "more than one Content-Length"
    if lengths and re.search(rb"\r\ntransfer-encoding:", fields, re.IGNORECASE):
        return "both Content-Length and Transfer-Encoding"
    if any(coding != b"chunked" for coding in _CODINGS.findall(fields)):
        return "a Transfer-Encoding other than chunked"
    return None


# Header lines built from what framing turns on: names in any case (and with stray spaces),
# separators, values that are digits and that are not, and raw bytes (CR, LF, tabs, NUL) anywhere.
_NAMES = st.sampled_from(
    [b"Host", b"Content-Length", b"CONTENT-LENGTH", b"content-length", b"Transfer-Encoding",
     b"transfer-encoding", b"X-A", b"Host ", b" Host", b"\tX", b"", b"Content-Length\r"]
)  # fmt: skip
_SEPARATORS = st.sampled_from([b":", b": ", b":\t", b": \t", b" :", b""])
_VALUES = st.sampled_from(
    [b"x", b"12", b"0", b" 7 ", b"+2", b"\xd9\xa2", b"2, 2", b"1_0", b"chunked", b"a\rb", b"a\nb",
     b"\x00", b"\xff", b""]
)  # fmt: skip
_LINE = st.one_of(
    st.tuples(_NAMES, _SEPARATORS, _VALUES).map(b"".join),
    st.lists(st.sampled_from([b"\r", b"\n", b" ", b"\t", b"a", b":"]), max_size=4).map(b"".join),
)
_LINES = st.lists(_LINE, max_size=5)


_REQUEST_LINES = st.sampled_from(
    [b"GET / HTTP/1.1", b"POST /api/waitlist HTTP/1.0", b"M-SEARCH * HTTP/1.1", b"head / HTTP/1.1",
     b"GE\nT / HTTP/1.1", b"GET  / HTTP/1.1", b"GET / HTTP/2.0", b"G(T / HTTP/1.1", b" / HTTP/1.1",
     b"GET /a\x00b HTTP/1.1", b"GET http://evil HTTP/1.1", b"GET /\x7f HTTP/1.1", b"GET / HTTP/1.1 "]
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(_REQUEST_LINES, _LINES)
def test_framing_fault_agrees_with_the_checks_made_in_turn(request_line: bytes, lines: list[bytes]) -> None:
    head = b"\r\n".join([request_line, *lines])
    assert framing_fault(head) == check_in_turn(head)


@pytest.mark.parametrize(
    "label",
    [b"\xff", b"utf-8\xff", b"utf\x00", b"\xe9", b"x" * 4000, b"utf-8\x00\x00"],
    ids=["not-utf8", "utf8-then-not", "nul", "latin1-byte", "long", "nuls"],
)
def test_a_hostile_charset_label_is_415_never_a_server_error(served: tuple[int, Path], label: bytes) -> None:
    """A charset label is the client's text: one holding NUL or bytes that are not UTF-8, or one no
    charset has, is 415 with the fixed sentence, and no error is logged."""
    port, log = served
    before = log.read_text()
    raw = (
        b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + b"Content-Type: application/json; charset=" + label + b"\r\n"
        + b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
    )
    assert [status for status, _ in exchange(port, raw)] == [415]
    assert "unhandled error" not in log.read_text()[len(before):]
