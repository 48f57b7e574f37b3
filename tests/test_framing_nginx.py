"""The framing forms the service refuses, sent through the shipped nginx configuration in front of
the real server: nginx refuses each before it reaches the service, and nothing is smuggled."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.db.engine import migrate
from tests.processes import free_port, start_server, stop
from tests.test_deploy_nginx import addresses, production_site
from tests.test_framing import BODY, JSON, SMUGGLED, exchange
from tests.tools import require_tool


@pytest.fixture(scope="module")
def nginx_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """nginx on the shipped site, with the server behind it as both upstreams."""
    nginx = require_tool("nginx", "the shipped nginx configuration is run to check what it refuses")
    folder: Path = tmp_path_factory.mktemp("framing-nginx")
    url = f"sqlite:///{folder / 'service.db'}"
    migrate(url)
    port, listen = free_port(), free_port()
    server = start_server(port, {"SERVICE_DATABASE_URL": url, "SERVICE_WAITLIST_RATE_LIMIT": "1000/minute"})
    prefix = production_site(folder / "nginx", addresses(listen, port, port))
    proxy = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr", "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(500):  # nginx starting up, not a clock
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=1).close()
                break
            except ConnectionRefusedError:
                threading.Event().wait(0.02)
        yield listen
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        stop(server)


FORMS = {
    "space-before-colon": b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
    + b"Transfer-Encoding : chunked\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY,
    "continuation-line": b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
    + b"X-Note: a\r\n Transfer-Encoding: chunked\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY,
    "chunk-without-crlf": b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
    + b"Transfer-Encoding: chunked\r\n\r\n5\r\n{}   XX0\r\n\r\n",
    "non-ascii-digit-length": b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
    + "Content-Length: ٢".encode() + b"\r\n\r\n{}",
    "repeated-lengths": b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON
    + b"Content-Length: 2\r\nContent-Length: 44\r\n\r\n{}",
}


@pytest.mark.parametrize("raw", FORMS.values(), ids=FORMS.keys())
def test_nginx_refuses_each_form_before_the_service(nginx_port: int, raw: bytes) -> None:
    """Each form is answered 400 by nginx, in the JSON shape, and the request after it is never
    read."""
    responses = exchange(nginx_port, raw + SMUGGLED)
    assert [status for status, _ in responses] == [400], responses
    assert responses[0][1].get("content-type") == "application/json"


def test_well_formed_requests_pass(nginx_port: int) -> None:
    """A well-formed registration goes through nginx to the service and is stored."""
    first = b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert [status for status, _ in exchange(nginx_port, first + last)] == [200, 200]
