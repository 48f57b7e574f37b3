"""deploy/nginx: the configuration passes `nginx -t`, and a running nginx proxies as docs/deploy.md says."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import re
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.certificates import self_signed
from tests.processes import ROOT, free_port
from tests.tools import require_tool

NGINX_DIR = ROOT / "deploy" / "nginx"
# What /etc/nginx/nginx.conf gives the site on a real machine, with the paths kept under the test's prefix.
PRODUCTION_MAIN = """\
pid nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path tmp_body;
    proxy_temp_path tmp_proxy;
    fastcgi_temp_path tmp_fastcgi;
    uwsgi_temp_path tmp_uwsgi;
    scgi_temp_path tmp_scgi;
    include service.conf;
}
"""


def load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nginx_render", NGINX_DIR / "render.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLACEHOLDERS = ("SERVER_NAME", "LISTEN", "UPSTREAM_1", "UPSTREAM_2")
# The public names the site is rendered with; the first is the one a request without a Host is sent on with.
PUBLIC_HOST = "waitlist.example.com"
SERVER_NAME = f"{PUBLIC_HOST} www.{PUBLIC_HOST}"
# Debian's and Ubuntu's stock site (/etc/nginx/sites-enabled/default, included after conf.d): the
# default_server of port 80, on the site's own address here.
STOCK_SITE = """\
server {
    listen %s default_server;
    server_name _;
    default_type text/html;
    return 200 "<h1>Welcome to nginx!</h1>";
}
"""


def addresses(listen: int, first: int, second: int) -> dict[str, str]:
    return {
        "SERVER_NAME": SERVER_NAME,
        "LISTEN": f"127.0.0.1:{listen}",
        "UPSTREAM_1": f"127.0.0.1:{first}",
        "UPSTREAM_2": f"127.0.0.1:{second}",
    }


def nginx_test(nginx: str, prefix: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nginx, "-t", "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def production_site(tmp_path: Path, values: dict[str, str]) -> Path:
    load_render().render(tmp_path, values)
    (tmp_path / "nginx.conf").write_text(PRODUCTION_MAIN)
    return tmp_path


def test_rehearsal_configuration_passes_nginx_t(tmp_path: Path) -> None:
    """The rehearsal's nginx.conf and the rendered site pass `nginx -t`, no placeholder left."""
    nginx = require_tool("nginx", "deploy/nginx is checked with nginx -t")
    main = load_render().render(tmp_path, addresses(free_port(), free_port(), free_port()), cluster=True)
    assert main == tmp_path / "nginx.conf"
    assert "${" not in (tmp_path / "service.conf").read_text()
    result = nginx_test(nginx, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


@pytest.mark.parametrize(
    "operators",
    [
        "default 1;",
        "default 0;\n        127.0.0.1 1;\n        192.0.2.0/24 1;",
    ],
    ids=["everyone", "operators-only"],
)
def test_production_site_passes_nginx_t(tmp_path: Path, operators: str) -> None:
    """The site in a plain http block passes `nginx -t`, open or kept to the operators' networks."""
    nginx = require_tool("nginx", "deploy/nginx is checked with nginx -t")
    prefix = production_site(tmp_path, addresses(8080, 8000, 8002))
    site = prefix / "service.conf"
    text = site.read_text()
    assert "default 1;" in text
    site.write_text(text.replace("default 1;", operators))
    result = nginx_test(nginx, prefix)
    assert result.returncode == 0, result.stderr


def test_render_names_what_is_missing(tmp_path: Path) -> None:
    """Rendering without the host name or the addresses refuses, naming the missing ones, and writes nothing."""
    render = load_render().render
    with pytest.raises(ValueError, match="UPSTREAM_2"):
        render(tmp_path, {"SERVER_NAME": PUBLIC_HOST, "LISTEN": "80", "UPSTREAM_1": "127.0.0.1:8000"})
    with pytest.raises(ValueError, match=r"^set SERVER_NAME \(the public host name") as refused:
        render(tmp_path, {"LISTEN": "80", "UPSTREAM_1": "127.0.0.1:8000", "UPSTREAM_2": "127.0.0.1:8002"})
    assert "LISTEN" not in str(refused.value)
    with pytest.raises(ValueError, match="SERVER_NAME"):
        render(tmp_path, {**addresses(80, 8000, 8002), "SERVER_NAME": " "})
    assert not (tmp_path / "service.conf").exists()
    # As docs/deploy.md runs it: the environment's names, the missing one said on stderr, exit status 2.
    env = {key: value for key, value in os.environ.items() if key not in PLACEHOLDERS}
    cli = subprocess.run(
        [sys.executable, str(NGINX_DIR / "render.py"), str(tmp_path)],
        env={**env, "LISTEN": "80", "UPSTREAM_1": "127.0.0.1:8000", "UPSTREAM_2": "127.0.0.1:8002"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (cli.returncode, cli.stderr) == (
        2,
        "render.py: set SERVER_NAME (the public host name(s), the canonical one first)\n",
    )
    assert not (tmp_path / "service.conf").exists()


def test_the_rehearsal_names_its_site_for_loopback(tmp_path: Path) -> None:
    """deploy/Procfile sets the addresses alone: --cluster names the site 127.0.0.1 and localhost."""
    values = addresses(8080, 8000, 8002)
    del values["SERVER_NAME"]
    load_render().render(tmp_path, values, cluster=True)
    assert "    server_name 127.0.0.1 localhost;\n" in (tmp_path / "service.conf").read_text()


class Echo(BaseHTTPRequestHandler):
    """An upstream that answers with the headers it was sent, and its own name."""

    name = ""

    def reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        seen = {key.lower(): value for key, value in self.headers.items()}
        payload = json.dumps({"server": self.name, "headers": seen, "length": len(body), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = reply
    do_POST = reply

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the replies."""


@contextmanager
def echo_server(name: str) -> Iterator[int]:
    handler = type(f"Echo_{name}", (Echo,), {"name": name})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def running_nginx(nginx: str, prefix: Path) -> Iterator[None]:
    process = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr", "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


def request(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request to nginx; waits for nginx to start listening (a start-up, not a clock)."""
    for _ in range(200):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request(method, path, body=body or None, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        except ConnectionRefusedError:
            threading.Event().wait(0.02)
        finally:
            connection.close()
    raise AssertionError(f"nginx never listened on {port}")


def test_running_proxy_forwards_client_address_and_limits_bodies(tmp_path: Path) -> None:
    """nginx replaces a client's X-Forwarded-For with its address, refuses 64 KiB+1 in the JSON shape, 503s when no server answers."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it forwards")
    listen = free_port()
    with echo_server("one") as first, echo_server("two") as second:
        prefix = production_site(tmp_path, addresses(listen, first, second))
        with running_nginx(nginx, prefix):
            status, _, body = request(
                listen,
                "GET",
                "/healthz",
                headers={"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=198.51.100.1"},
            )
            assert status == 200
            seen = json.loads(body)["headers"]
            assert seen["x-forwarded-for"] == "127.0.0.1"
            assert "forwarded" not in seen
            assert "connection" not in seen  # HTTP/1.1 kept alive to the upstream, never "close"

            status, _, body = request(listen, "POST", "/api/waitlist", body=b"x" * (64 * 1024))
            assert (status, json.loads(body)["length"]) == (200, 64 * 1024)
            status, headers, body = request(listen, "POST", "/api/waitlist", body=b"x" * (64 * 1024 + 1))
            assert status == 413
            assert headers["content-type"] == "application/json"
            assert json.loads(body) == {"ok": False, "message": "The request body is too large."}
            names = {json.loads(request(listen, "GET", "/")[2])["server"] for _ in range(4)}
            assert names == {"one", "two"}
            for path in ("/admin", "/admin/", "/admin/partners"):  # each the servers' to answer
                status, _, body = request(listen, "GET", path)
                assert (status, json.loads(body)["path"]) == (200, path)
    with running_nginx(nginx, prefix):
        status, headers, body = request(listen, "GET", "/healthz")
        assert status == 503
        assert headers["retry-after"] == "5"
        assert json.loads(body) == {
            "ok": False,
            "message": "The service is briefly unavailable; try again shortly.",
        }


def test_operators_only_keeps_admin_and_console_to_their_networks(tmp_path: Path) -> None:
    """With `default 0`, /admin and /console answer 403 in the JSON shape to other addresses; the rest is proxied."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it refuses")
    listen = free_port()
    with echo_server("one") as first, echo_server("two") as second:
        prefix = production_site(tmp_path, addresses(listen, first, second))
        site = prefix / "service.conf"
        site.write_text(site.read_text().replace("default 1;", "default 0;\n        192.0.2.0/24 1;"))
        with running_nginx(nginx, prefix):
            for path in ("/admin", "/admin/partners", "/console", "/console/partners"):
                status, headers, body = request(listen, "GET", path)
                assert (status, headers["content-type"]) == (403, "application/json"), path
                assert json.loads(body) == {
                    "ok": False,
                    "message": "This address may not reach this part of the service.",
                }
            assert request(listen, "GET", "/api/v1")[0] == 200


def wait_listening(port: int) -> None:
    """Until nginx accepts connections on ``port`` (a start-up, not a clock)."""
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except ConnectionRefusedError:
            threading.Event().wait(0.02)
    raise AssertionError(f"nginx never listened on {port}")


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """``raw`` bytes sent to nginx as they are; its one answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def client_hello() -> bytes:
    """The first bytes a TLS client sends: what reaches an HTTP port a client took for HTTPS."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=PUBLIC_HOST)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """nginx on the shipped site (no other site), two echoing upstreams behind it; its port."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it answers")
    listen = free_port()
    with echo_server("one") as first, echo_server("two") as second:
        prefix = production_site(tmp_path_factory.mktemp("site"), addresses(listen, first, second))
        with running_nginx(nginx, prefix):
            wait_listening(listen)
            yield listen


NOT_VALID = "The request is not valid."
# Requests nginx refuses itself, some before it has a URI (the first four): each answered in the JSON shape.
REFUSED = {
    "lowercase-method": (b"get / HTTP/1.1\r\nHost: x\r\n\r\n", 400, NOT_VALID),
    "space-in-target": (b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400, NOT_VALID),
    "tls-on-http-port": (None, 400, NOT_VALID),
    "target-over-8k": (
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        414,
        "The request line is too long.",
    ),
    "header-over-8k": (b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\n", 400, NOT_VALID),
    "gzip-chunked": (
        b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
        "This Transfer-Encoding is not supported; send chunked alone.",
    ),
    "http-2.0-line": (
        b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        505,
        "This HTTP version is not supported; send HTTP/1.1.",
    ),
    "trace": (b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n", 405, "This method is not allowed here."),
    "error-page-asked-for": (b"GET /.errors/400 HTTP/1.1\r\nHost: x\r\n\r\n", 404, "Nothing is here."),
}


@pytest.mark.parametrize(("raw", "status", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_requests_nginx_refuses_are_answered_in_the_json_shape(
    site: int, raw: bytes | None, status: int, message: str
) -> None:
    """A request nginx cannot parse gets the JSON 400 (a named error page gave nginx's HTML 500), and
    501, 505, 405 and 404 take the shape too."""
    answered, headers, body = exchange(site, raw if raw is not None else client_hello())
    assert (answered, headers.get("content-type")) == (status, "application/json"), body
    assert json.loads(body) == {"ok": False, "message": message}


HSTS_COMMENTED = '# add_header Strict-Transport-Security "max-age=31536000" always;'


def test_plain_http_on_the_tls_port_is_answered_in_the_json_shape(tmp_path: Path) -> None:
    """With the `listen 443 ssl` docs/deploy.md asks for, plain HTTP sent to it is the JSON 400, not
    nginx's HTML page (497); with its Strict-Transport-Security lines uncommented, answers over TLS
    carry the header."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it answers")
    listen = free_port()
    cert, secret = self_signed(tmp_path, PUBLIC_HOST)
    with echo_server("one") as first, echo_server("two") as second:
        values = {**addresses(listen, first, second), "LISTEN": f"127.0.0.1:{listen} ssl"}
        prefix = production_site(tmp_path, values)
        site = prefix / "service.conf"
        text = site.read_text()
        # docs/deploy.md: with TLS, uncomment the two Strict-Transport-Security lines.
        assert text.count(HSTS_COMMENTED) == 2
        site.write_text(
            text.replace(HSTS_COMMENTED, HSTS_COMMENTED.replace("# ", "", 1)).replace(
                "    server_tokens off;\n",
                f"    server_tokens off;\n    ssl_certificate {cert};\n    ssl_certificate_key {secret};\n",
            )
        )
        with running_nginx(nginx, prefix):
            wait_listening(listen)
            status, headers, body = exchange(listen, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (status, headers["content-type"]) == (400, "application/json"), body
            assert json.loads(body) == {"ok": False, "message": NOT_VALID}
            context = ssl.create_default_context(cafile=cert)
            with context.wrap_socket(
                socket.create_connection(("127.0.0.1", listen), timeout=10), server_hostname=PUBLIC_HOST
            ) as tls:
                tls.sendall(
                    b"GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % PUBLIC_HOST.encode()
                )
                response = http.client.HTTPResponse(tls)
                response.begin()
                assert json.loads(response.read())["headers"]["x-forwarded-proto"] == "https"
                assert response.getheader("Strict-Transport-Security") == "max-age=31536000"


def test_the_site_answers_its_names_beside_a_stock_default_site(tmp_path: Path) -> None:
    """With Debian's stock site (default_server) on the same port, a request for the public names is the
    service's; one for any other Host, or one nginx cannot parse, is the stock site's (docs/deploy.md
    step 8 disables it)."""
    nginx = require_tool("nginx", "deploy/nginx is run to check which site answers")
    listen = free_port()
    with echo_server("one") as first, echo_server("two") as second:
        prefix = production_site(tmp_path, addresses(listen, first, second))
        (prefix / "stock.conf").write_text(STOCK_SITE % f"127.0.0.1:{listen}")
        main = prefix / "nginx.conf"
        main.write_text(
            main.read_text().replace(
                "include service.conf;", "include service.conf;\n    include stock.conf;"
            )
        )
        with running_nginx(nginx, prefix):
            for host in (PUBLIC_HOST, f"www.{PUBLIC_HOST}", f"{PUBLIC_HOST.upper()}:{listen}"):
                status, headers, body = request(listen, "GET", "/healthz", headers={"Host": host})
                assert (status, headers["content-type"]) == (200, "application/json"), body
                assert json.loads(body)["headers"]["host"] == host.lower().split(":")[0]
            status, _, body = request(listen, "GET", "/healthz")  # Host: 127.0.0.1:PORT
            assert (status, body) == (200, b"<h1>Welcome to nginx!</h1>")
            # A request nginx cannot parse has no Host it read: the default server answers, in its own HTML.
            status, headers, _ = exchange(
                listen, b"get / HTTP/1.1\r\nHost: %s\r\n\r\n" % PUBLIC_HOST.encode()
            )
            assert (status, headers["content-type"]) == (400, "text/html")


def test_a_request_without_host_reaches_the_servers_with_the_public_name(site: int) -> None:
    """An HTTP/1.0 request without Host is sent on with the first server_name as its Host (an empty $host
    sent none, and the servers refuse an HTTP/1.1 request without one)."""
    status, _, body = exchange(site, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status == 200, body
    assert json.loads(body)["headers"]["host"] == PUBLIC_HOST


@contextmanager
def recording_upstream() -> Iterator[tuple[int, list[bytes]]]:
    """An upstream that keeps the raw head of each request it gets and answers 200 with a JSON body."""
    heads: list[bytes] = []

    class Recorder(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            received = b""
            while not re.search(rb"\r?\n\r?\n", received):
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                received += chunk
            head, rest = re.split(rb"\r?\n\r?\n", received, maxsplit=1)
            heads.append(head)
            length = re.search(rb"(?im)^content-length:[ \t]*(\d+)", head)
            while length and len(rest) < int(length[1]):
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                rest += chunk
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
                b'Connection: close\r\n\r\n{"ok":true}'
            )

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Recorder)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), heads
    finally:
        server.shutdown()
        server.server_close()


# Forms the service refuses that nginx lets through: what reaches the servers is nginx's own head, in
# CRLF lines, without a header nginx does not take (a name of anything but letters, digits and hyphens)
# and without Expect, so the service's 400 and 417 for them are never seen behind nginx.
FORWARDED = {"host", "x-forwarded-for", "x-forwarded-proto"}
PASSED_ON = {
    "bare-lf-lines": (
        b"POST /api/waitlist HTTP/1.1\nHost: x\nContent-Length: 2\nX-Note: a\n\n{}",
        {*FORWARDED, "content-length", "x-note"},
    ),
    "underscore-name": (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer_Encoding: chunked\r\n\r\n", FORWARDED),
    "non-token-name": (b"GET / HTTP/1.1\r\nHost: x\r\nX(Note): a\r\n\r\n", FORWARDED),
    "non-ascii-name": (b"GET / HTTP/1.1\r\nHost: x\r\nX-N\xc3\xb6te: a\r\n\r\n", FORWARDED),
    "expect-other": (
        b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\nContent-Length: 2\r\n\r\n{}",
        {*FORWARDED, "content-length"},
    ),
}


@pytest.mark.parametrize(("raw", "names"), PASSED_ON.values(), ids=PASSED_ON.keys())
def test_forms_nginx_passes_on_reach_the_servers_rewritten(
    tmp_path: Path, raw: bytes, names: set[str]
) -> None:
    """As docs/architecture.md says: these pass nginx, and the servers get a clean head in their place."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it passes on")
    listen = free_port()
    with recording_upstream() as (upstream, heads):
        prefix = production_site(tmp_path, addresses(listen, upstream, upstream))
        with running_nginx(nginx, prefix):
            wait_listening(listen)
            assert exchange(listen, raw)[0] == 200
    [head] = heads
    lines = head.decode("ascii").split("\r\n")
    assert re.fullmatch(r"(GET|POST) /\S* HTTP/1\.1", lines[0]), head
    fields = [re.fullmatch(r"([A-Za-z0-9-]+): ([^\r\n]*)", line) for line in lines[1:]]
    assert all(fields), head
    assert {field[1].lower() for field in fields if field} == names


class LongLocation(Echo):
    """An upstream whose redirects repeat the target three times over, as the console's sign-in link
    percent-encodes a target's every "/": a head of some 24k for an 8k target."""

    def do_GET(self) -> None:
        if not self.path.startswith("/console"):
            return self.reply()
        self.send_response(303)
        self.send_header("Location", "/console/login?next=" + self.path.replace("/", "%2F"))
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None


def test_an_answer_with_a_long_location_passes_and_leaves_its_server_in_rotation(tmp_path: Path) -> None:
    """A redirect whose Location is three times an 8k target reaches the client; nginx's default
    4k head buffer answered 502 instead and counted the server failed, and two such requests took
    both servers out: every client answered 503 for fail_timeout."""
    nginx = require_tool("nginx", "deploy/nginx is run to check what it passes on")
    listen = free_port()
    servers = []
    with contextlib.ExitStack() as stack:
        for name in ("one", "two"):
            handler = type(f"LongLocation_{name}", (LongLocation,), {"name": name})
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stack.callback(server.server_close)
            stack.callback(server.shutdown)
            servers.append(int(server.server_address[1]))
        prefix = production_site(tmp_path, addresses(listen, *servers))
        stack.enter_context(running_nginx(nginx, prefix))
        target = "/console/deliveries?partner=" + "/" * 7000
        answers = [request(listen, "GET", target)[:2] for _ in range(2)]
        names = {json.loads(request(listen, "GET", "/")[2])["server"] for _ in range(4)}
    assert [status for status, _ in answers] == [303, 303]
    assert all(len(headers["location"]) > 21_000 for _, headers in answers)
    assert names == {"one", "two"}  # both still in rotation
