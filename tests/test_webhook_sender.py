"""The ``Sender`` alone, against partners that answer in ways an HTTP server library would not."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest

from service.clock import ManualClock
from service.webhooks import send
from service.webhooks.send import MAX_INFORMATIONAL, Sender, StaleConnection, without_secrets
from service.webhooks.signing import secret_digest
from tests.certificates import self_signed
from tests.processes import ROOT


@asynccontextmanager
async def trickling(status: int) -> AsyncIterator[str]:
    """A partner that sends its head and the first bytes of a long body, then nothing more until
    the test is over; the URL to reach it."""
    done = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status} OK\r\nContent-Length: 100000\r\n\r\nreceived".encode())
        await writer.drain()
        await done.wait()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        done.set()
        server.close()
        await server.wait_closed()


async def test_a_body_that_trickles_after_its_status_frees_the_slot_within_the_excerpt_bound() -> None:
    """The status is what counts: once it is in, the partner has the excerpt's bound (not the
    attempt's whole timeout) to send the bytes the log keeps, and what came by then is kept."""
    async with (
        trickling(200) as url,
        Sender(timeout=60, allow_private=True, clock=ManualClock(), excerpt_timeout=0.05) as sender,
    ):
        attempt = await asyncio.wait_for(
            sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"]),
            timeout=10,  # the attempt's own timeout is a minute; an unbounded excerpt would hit this
        )
    assert (attempt.status_code, attempt.error_class, attempt.response_excerpt) == (200, None, "received")


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One request off the connection; its delivery id (the ``webhook-id`` header)."""
    head = await reader.readuntil(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    await reader.readexactly(int(fields[b"Content-Length"]))
    return fields[b"webhook-id"]


async def test_bytes_a_partner_sends_on_an_idle_connection_never_answer_the_next_request() -> None:
    """A partner writes an answer to no request on a kept-alive connection: the next delivery goes
    out on another connection and is answered there, never marked by the stale bytes (a stale 200
    marked a delivery delivered that never left)."""
    received: list[bytes] = []
    stale_written = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                received.append(await _read_request(reader))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                if len(received) == 1:
                    await stale_written.wait()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")
                    await writer.drain()
                    stale_written.clear()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def ping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answered once the stale bytes are on their way: by its answer they have arrived."""
        await reader.readexactly(1)
        stale_written.set()
        while stale_written.is_set():
            await asyncio.sleep(0)
        writer.write(b".")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    pinger = await asyncio.start_server(ping, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    try:
        async with Sender(timeout=10, allow_private=True, clock=ManualClock()) as sender:
            first = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"])
            reader, writer = await asyncio.open_connection("127.0.0.1", pinger.sockets[0].getsockname()[1])
            writer.write(b"?")
            await reader.readexactly(1)
            writer.close()
            for _ in range(3):  # the stale bytes are read off the idle connection by now
                await asyncio.sleep(0)
            second = await sender.send(url=url, event="room.claimed", delivery_id="dlv_2", body=b"{}", secrets=["s"])
    finally:
        for running in (server, pinger):
            running.close()
    assert (first.status_code, first.response_excerpt) == (200, "ok")
    assert (second.status_code, second.response_excerpt) == (200, "ok")
    assert received == [b"dlv_1", b"dlv_2"]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FLOOD = b"HTTP/1.1 100 Continue\r\n\r\n" * 64
HINT = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _informational(count: int | None) -> Handler:
    """A partner that sends ``count`` informational answers (a flood of them for ever if None),
    then its final one."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        try:
            sent = 0
            while count is None or sent < count:
                writer.write(FLOOD if count is None else HINT)
                await writer.drain()
                sent += 1
            writer.write(FINAL)
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    return answer


async def test_a_partner_streaming_informational_answers_fails_the_attempt_at_once() -> None:
    """A partner that sends "100 Continue" for ever: the attempt ends as "protocol" after
    MAX_INFORMATIONAL of them, long before its one-minute timeout, the loop free meanwhile."""
    server = await asyncio.start_server(_informational(None), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    try:
        async with Sender(timeout=60, allow_private=True, clock=ManualClock()) as sender:
            attempt = await asyncio.wait_for(
                sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"]),
                timeout=10,
            )
    finally:
        server.close()
    assert (attempt.status_code, attempt.error_class) == (None, "protocol")


async def test_a_few_informational_answers_before_the_final_one_are_read_past() -> None:
    server = await asyncio.start_server(_informational(MAX_INFORMATIONAL), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    try:
        async with Sender(timeout=10, allow_private=True, clock=ManualClock()) as sender:
            attempt = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"])
    finally:
        server.close()
    assert (attempt.status_code, attempt.response_excerpt) == (200, "ok")


def test_a_new_connection_answered_before_it_is_asked_fails_the_attempt_once(tmp_path) -> None:
    """A TLS partner that sends an answer behind its handshake: the attempt is "protocol" on that
    one connection, never tried again on new ones (each of which the partner can hold for the
    connect timeout), and never marked delivered by the answer to no request."""
    cert, key = self_signed(tmp_path, "127.0.0.1")
    finished = subprocess.run(
        [sys.executable, "-m", "tests.early_tls_partner", str(cert), str(key)],
        env=os.environ | {"SSL_CERT_FILE": str(cert)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(finished.stdout) == {"status": None, "error": "protocol", "connections": 1}


async def test_an_attempt_tried_again_on_another_connection_keeps_its_one_deadline(monkeypatch) -> None:
    """Spoiled pooled connections send the request on another, within what is left of the
    attempt's timeout, not a timeout of its own each; with nothing left, the attempt is "timeout"."""
    now = [0.0]
    given: list[tuple[float | None, float | None]] = []

    async def spoiled(target, body, headers, timeout, secrets):
        given.append((timeout.total, timeout.connect))
        now[0] += 6.0
        raise StaleConnection("the partner wrote on an idle connection")

    async with Sender(
        timeout=15, connect_timeout=5, allow_private=True, clock=ManualClock(), timer=lambda: now[0]
    ) as sender:
        monkeypatch.setattr(sender, "_post", spoiled)
        met = await sender.send(
            url="http://127.0.0.1:1/hook", event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"]
        )
    assert given == [(15, 5), (9.0, 5), (3.0, 3.0)]
    assert (met.status_code, met.error_class, met.duration_ms) == (None, "timeout", 18_000)


SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="  # 32 bytes, base64
OLDER = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
# Keys holding "+" and "/", which a partner's encoder may escape: a live one, another partner's.
SLASHED = "whsec_" + "eF8+x+sy8wuQzQ/PNlfTiLX/Qpfy+XFv9m6bacBd3Qk="
FOREIGN = "whsec_" + "aE/jnwN1jeaogq5h+mIxK2flseZlkoy/PcPY9PU+NWI="
# How encoders write "+", "/" and "=": PHP's json_encode, .NET's JSON encoder (either case of hex),
# percent-encoding (either case), HTML character references (decimal, hex, leading zeros).
PHP = {"/": "\\/"}
DOTNET = {"+": "\\u002B", "/": "\\u002F", "=": "\\u003D"}
DOTNET_LOWER = {"+": "\\u002b", "/": "\\u002f", "=": "\\u003d"}
PERCENT = {"+": "%2B", "/": "%2F", "=": "%3D"}
PERCENT_LOWER = {"+": "%2b", "/": "%2f", "=": "%3d"}
PERCENT_TWICE = {"+": "%252B", "/": "%252f", "=": "%253D"}  # a URL in another URL's query
# A key whose first characters, after an encoded "%" (``%25``), read as "+" encoded twice.
STARTS_2B = "2Bxx+yy" + "A" * 36 + "="
HTML_DECIMAL = {"+": "&#43;", "/": "&#047;", "=": "&#61;"}
HTML_HEX = {"+": "&#x2B;", "/": "&#x2f;", "=": "&#X003D;"}


def spelled(value: str, spellings: dict[str, str], times: int = -1) -> str:
    """``value`` as an encoder writes it: its first ``times`` (all if -1) of each of "+", "/", "="."""
    for char, spelling in spellings.items():
        value = value.replace(char, spelling, times)
    return value


@pytest.mark.parametrize(
    ("answer", "secrets", "kept"),
    [
        (f"bad signature, we used {SECRET}", [SECRET, OLDER], "bad signature, we used [secret]"),
        (f"key={SECRET.removeprefix('whsec_')};", [SECRET], "key=[secret];"),  # without its prefix
        (f"{'x' * 240}{OLDER}", [SECRET, OLDER], f"{'x' * 240}[secret]"),  # where the cut would halve it
        ("yes sir", ["s"], "yes sir"),  # a key too short to be a secret is never looked for
        (f"we still hold {OLDER}", [SECRET], "we still hold [secret]"),  # retired by a rotation
        (f"{OLDER[:-1]}+ and {OLDER}x", [SECRET], f"{OLDER[:-1]}+ and [secret]x"),  # the issued form only
        # Without its prefix a retired secret is 44 characters of base64, as a signature is: kept.
        (f"expected {OLDER.removeprefix('whsec_')}", [SECRET], f"expected {OLDER.removeprefix('whsec_')}"),
        # Escaped by the partner's encoder, each "+", "/" and "=" on its own: the secret all the same.
        (f'{{"expected":"{spelled(SLASHED, PHP)}"}}', [SECRET, SLASHED], '{"expected":"[secret]"}'),
        (f'{{"expected":"{spelled(SLASHED, DOTNET)}"}}', [SLASHED], '{"expected":"[secret]"}'),
        (f"key={spelled(SLASHED.removeprefix('whsec_'), DOTNET_LOWER)};", [SLASHED], "key=[secret];"),
        (f"?a={spelled(SLASHED, PERCENT)}&b={spelled(SLASHED, PERCENT_LOWER)}", [SLASHED], "?a=[secret]&b=[secret]"),
        (f"<b>{spelled(SLASHED, HTML_DECIMAL)}</b> {spelled(SLASHED, HTML_HEX)}", [SLASHED], "<b>[secret]</b> [secret]"),
        (f"next=%2Fhook%3Fkey%3D{spelled(SLASHED, PERCENT_TWICE)}", [SLASHED], "next=%2Fhook%3Fkey%3D[secret]"),
        (f"key={spelled(spelled(SLASHED, PERCENT_TWICE, 1), PERCENT, 1)}", [SLASHED], "key=[secret]"),
        (f"rate=100%25{spelled(STARTS_2B, PERCENT)}", ["whsec_" + STARTS_2B], "rate=100%25[secret]"),
        (f"key={spelled(SLASHED, PERCENT).removesuffix('%3D')};", [SLASHED], "key=[secret];"),  # unpadded
        (f"mixed {spelled(spelled(SLASHED, PERCENT_LOWER, 1), DOTNET, 1)}", [SLASHED], "mixed [secret]"),
        (f"{'x' * 200}{spelled(SLASHED, HTML_DECIMAL)}", [SLASHED], f"{'x' * 200}[secret]"),  # the cut would halve it
        # Another partner's, in the issued form: the form is enough, whatever its spelling.
        (f"theirs: {spelled(FOREIGN, PHP)} {spelled(FOREIGN, PERCENT)}", [SECRET], "theirs: [secret] [secret]"),
        (f"theirs: {spelled(FOREIGN, HTML_HEX)}", [SECRET], "theirs: [secret]"),
        (f"theirs: {spelled(FOREIGN, PERCENT_TWICE)}", [SECRET], "theirs: [secret]"),
        (f"{spelled(FOREIGN[:-1], DOTNET)}\\u002B", [SECRET], f"{spelled(FOREIGN[:-1], DOTNET)}\\u002B"),  # the form only
        (f"theirs: {spelled(FOREIGN[:-1], PERCENT)};", [SECRET], "theirs: [secret];"),  # without its padding
    ],
)
async def test_a_partner_echoing_its_own_secret_never_has_it_kept(answer: str, secrets: list[str], kept: str) -> None:
    """The excerpt the attempt log keeps (and listings and the console show) has the partner's
    signing secrets written as ``[secret]``, whole or without ``whsec_``, before it is cut."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        body = answer.encode()
        writer.write(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    async with server, Sender(timeout=10, allow_private=True, clock=ManualClock()) as sender:
        attempt = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=secrets)
    assert (attempt.status_code, attempt.response_excerpt) == (500, kept)


def _utf16le(text: str) -> bytes:
    return text.encode("utf-16-le")


@pytest.mark.parametrize(
    ("head", "body", "then", "kept"),
    [
        # Read in the character set it declares or its byte order mark names; an answer that holds a
        # secret in any other reading of its bytes (UTF-16 read as UTF-8 has a NUL between each
        # letter; an ASCII answer labelled UTF-16 reads as other characters) keeps no excerpt.
        ("Content-Type: text/plain; charset=utf-16", "expected à".encode("utf-16"), b"", "expected à"),
        ("Content-Type: text/plain; charset=utf-16", "expected à".encode("utf-16-be"), b"", "expected à"),
        ("Content-Type: text/plain; charset=utf-16", f"expected {SECRET}".encode("utf-16"), b"", send.SPELLED_APART),
        ("Content-Type: text/plain; charset=utf-16", f"expected {SECRET}".encode("utf-16-be"), b"", send.SPELLED_APART),
        ("Content-Type: text/plain; charset=utf-16", f"expected {SECRET}".encode(), b"", send.SPELLED_APART),
        ("", f"expected {SECRET}".encode("utf-16"), b"", send.SPELLED_APART),
        ("Content-Type: text/plain; charset=rot13", f"expected {SECRET}".encode(), b"", "expected [secret]"),
        ("Content-Type: text/plain; charset=idna", f"expected {SECRET} \xff".encode("latin-1"), b"",
         "expected [secret] \ufffd"),  # a codec that refuses even with replacement: read as UTF-8
        ("Content-Type: text/plain; charset=undefined", b"ok", b"", "ok"),
        # Characters between that do not show.
        ("", _utf16le(f"expected {SECRET}"), b"", send.SPELLED_APART),
        ("", f"expected {SECRET[:20]}\u200b{SECRET[20:]}".encode(), b"", send.SPELLED_APART),
        ("", f"expected {SECRET[:20]}\n{SECRET[20:]}".encode(), b"", send.SPELLED_APART),
        ("", ("expected " + "".join(c + "\U000e0020" for c in SECRET)).encode(), b"", send.SPELLED_APART),
        # Cut short by the excerpt's bound: the key without its padding, or the start of one.
        ("", f"expected {SECRET[:-1]}".encode(), b"=", "expected [secret]"),
        ("", f"expected {SECRET[:30]}".encode(), SECRET[30:].encode(), "expected [secret]"),
        ("", f"expected {SECRET.removeprefix('whsec_')[:12]}".encode(), b"more", "expected [secret]"),
        ("", b"Signature received", b" more", "Signature received"),  # a word, not a key's start
        ("", f"expected {OLDER[:-1]}".encode(), b"=", "expected [secret]"),  # any issued one, unpadded
        # What holds no secret reads as before, its line breaks marked.
        ("", b"line one\nline two", b"", "line one\ufffdline two"),
        ("", b"cut short after a word", b" more", "cut short after a word"),
    ],
)
async def test_a_secret_echoed_in_another_encoding_apart_or_cut_short_is_never_kept(
    head: str, body: bytes, then: bytes, kept: str
) -> None:
    """An answer in UTF-16, one that spells the secret with characters between that do not show,
    and one cut short by the excerpt's time bound (``then`` never comes in time) keep no secret."""
    done = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        length = len(body) + len(then)
        writer.write(f"HTTP/1.1 401 No\r\nContent-Length: {length}\r\n{head + chr(13) + chr(10) if head else ''}\r\n".encode())
        writer.write(body)
        await writer.drain()
        if then:
            await done.wait()
            writer.write(then)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    async with server, Sender(timeout=10, allow_private=True, clock=ManualClock(), excerpt_timeout=0.05) as sender:
        attempt = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=[SECRET])
        done.set()
    assert (attempt.status_code, attempt.response_excerpt) == (401, kept)


RETIRED = OLDER.removeprefix("whsec_")
SIGNATURE = "v1,K7gNU3sdo+OL0wNhqoVWhr3g6s1xYv72ol/pe/Unols="  # 32 bytes of base64, as a key is
RETIRED_SLASHED = "SC2Wc8/uXeOR+X/eTRyE+fjW8s8HhPz/uVi0Ay3nI2w="  # retired too, holding "+" and "/"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"expected {RETIRED}", "expected [secret]"),  # retired by a rotation, known by its digest
        (f"got {SIGNATURE}", f"got {SIGNATURE}"),  # a signature: no digest of the partner's
        (f"a={SECRET} b={RETIRED}", "a=[secret] b=[secret]"),  # live and retired together
        ("short answer", "short answer"),
        # Escaped by the partner's encoder: unescaped, its digest is the partner's all the same.
        (f'{{"expected":"{spelled(RETIRED_SLASHED, PHP)}"}}', '{"expected":"[secret]"}'),
        (f"expected {spelled(RETIRED_SLASHED, DOTNET)}", "expected [secret]"),
        (f"expected {spelled(RETIRED_SLASHED, DOTNET_LOWER)}", "expected [secret]"),
        (f"?key={spelled(RETIRED_SLASHED, PERCENT)}&old={spelled(RETIRED_SLASHED, PERCENT_LOWER)}", "?key=[secret]&old=[secret]"),
        (f"<code>{spelled(RETIRED_SLASHED, HTML_DECIMAL)}</code>", "<code>[secret]</code>"),
        (f"<code>{spelled(RETIRED_SLASHED, HTML_HEX)}</code>", "<code>[secret]</code>"),
        (f"expected {spelled(spelled(RETIRED_SLASHED, HTML_HEX, 1), PHP, 2)}", "expected [secret]"),  # mixed
        (f"a={spelled(RETIRED, PERCENT)} b={spelled(RETIRED_SLASHED, DOTNET)}", "a=[secret] b=[secret]"),
        # After another escape, a key stands alone as after the character it stands for.
        (f"Expected \\u0027{spelled(RETIRED_SLASHED, DOTNET)}\\u0027", "Expected \\u0027[secret]\\u0027"),
        (f"error=expected%20{spelled(RETIRED_SLASHED, PERCENT)}%22", "error=expected%20[secret]%22"),
        # Encoded twice (JSON in a URL in another URL's query), or once after an encoded "%".
        (
            f"next=%257B%2522old%2522%253A%2522{spelled(RETIRED_SLASHED, PERCENT_TWICE)}%2522%257D",
            "next=%257B%2522old%2522%253A%2522[secret]%2522%257D",
        ),
        (f"rate=100%25{spelled(STARTS_2B, PERCENT)}", "rate=100%25[secret]"),
        (f'{{"error":"expected:\\n{spelled(RETIRED_SLASHED, PHP)}"}}', '{"error":"expected:\\n[secret]"}'),
        # A signature, escaped, is no more the partner's than written as is; nor a longer run.
        (f'{{"got":"{spelled(SIGNATURE, PHP)}"}}', f'{{"got":"{spelled(SIGNATURE, PHP)}"}}'),
        (f"got {spelled(SIGNATURE, DOTNET_LOWER)}&x", f"got {spelled(SIGNATURE, DOTNET_LOWER)}&x"),
        (f"got {spelled(SIGNATURE, HTML_DECIMAL)}", f"got {spelled(SIGNATURE, HTML_DECIMAL)}"),
        (f"x&#43;{spelled(RETIRED_SLASHED, HTML_HEX)}", f"x&#43;{spelled(RETIRED_SLASHED, HTML_HEX)}"),
        # No escape's lead: matched as written, the rest untouched.
        (f'{{"got":"{SIGNATURE}","old":"{RETIRED_SLASHED}"}}', f'{{"got":"{SIGNATURE}","old":"[secret]"}}'),
        # Without its padding (an encoder that strips it), as is or escaped; a signature so, kept.
        (f"expected {RETIRED.rstrip('=')}", "expected [secret]"),
        (f"expected {RETIRED.rstrip('=')}.", "expected [secret]."),
        (f"?key={spelled(RETIRED_SLASHED.rstrip('='), PERCENT)}&x=1", "?key=[secret]&x=1"),
        (f"got {SIGNATURE.rstrip('=')}", f"got {SIGNATURE.rstrip('=')}"),
        (f"run {RETIRED.rstrip('=')}A", f"run {RETIRED.rstrip('=')}A"),  # 44 key characters: no key
    ],
)
def test_a_retired_secret_echoed_without_its_prefix_is_known_by_its_digest(text: str, kept: str) -> None:
    """The service keeps the digest of every secret it issued, not the secret: a bare key whose
    digest is the partner's is written ``[secret]``, any other 44 characters of base64 kept."""
    digests = {secret_digest(SECRET), secret_digest(OLDER), secret_digest("whsec_" + RETIRED_SLASHED)}
    digests.add(secret_digest("whsec_" + STARTS_2B))
    assert without_secrets(text, [SECRET], digests) == kept


def test_an_answer_holding_no_escape_is_matched_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt's excerpt is redacted: one holding none of "\\", "%" and "&" (what every escaped
    spelling begins with) never pays for the patterns of escaped spellings, and reads as before."""

    def escaped(*args: object) -> str:
        raise AssertionError("an answer without an escape took the escaped spellings' patterns")

    monkeypatch.setattr(send, "_without_escaped_secrets", escaped)
    text = f'{{"expected":"{SLASHED}","got":"{SIGNATURE}","old":"{RETIRED_SLASHED}"}}'
    digests = {secret_digest("whsec_" + RETIRED_SLASHED)}
    assert without_secrets(text, [SLASHED], digests) == f'{{"expected":"[secret]","got":"{SIGNATURE}","old":"[secret]"}}'


async def test_a_partner_answering_in_one_byte_chunks_is_read_no_further_than_the_excerpt_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20,000 chunks of one byte (120 KB): every chunk is a call into Python as aiohttp takes it
    in, so reading them all spent 60 times a plain answer's CPU on the worker's loop. The sender
    takes in about what its excerpt needs (1,024 bytes, one a chunk), and stops reading there."""
    fed = [0]
    feed_data = aiohttp.StreamReader.feed_data

    def counted(self: aiohttp.StreamReader, data: bytes, *args: object) -> None:
        fed[0] += 1
        feed_data(self, data, *args)

    monkeypatch.setattr(aiohttp.StreamReader, "feed_data", counted)

    async def chunky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + b"1\r\nx\r\n" * 20_000 + b"0\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(chunky, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    async with server, Sender(timeout=10, allow_private=True, clock=ManualClock()) as sender:
        attempt = await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"])
    assert (attempt.status_code, attempt.response_excerpt) == (200, "x" * 256)
    # At least the excerpt's 1,024 (so the count still sees aiohttp's calls); under aiohttp's
    # default buffer, 16,386.
    assert 1_024 <= fed[0] < 2_048


async def test_an_answer_of_a_whole_page_leaves_its_connection_for_the_next_attempt() -> None:
    """A 16 KB page (a web framework's error page) is read whole, past the excerpt, so the connection
    is kept: buffering less of a body would close it, and a new one cost every attempt three times
    a plain answer's CPU."""
    connections = [0]

    async def page(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await _read_request(reader)
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 16000\r\n\r\n" + b"x" * 16_000)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(page, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    async with server, Sender(timeout=10, allow_private=True, clock=ManualClock()) as sender:
        attempts = [
            await sender.send(url=url, event="room.claimed", delivery_id=f"dlv_{n}", body=b"{}", secrets=["s"])
            for n in range(3)
        ]
    assert [(attempt.status_code, attempt.response_excerpt) for attempt in attempts] == [(404, "x" * 256)] * 3
    assert connections == [1]
