"""deploy/nginx: the configuration passes `nginx -t`, and a running nginx proxies as docs/deploy.md says."""

from __future__ import annotations

import http.client
import importlib.util
import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

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


def addresses(listen: int, first: int, second: int) -> dict[str, str]:
    return {
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
    """Rendering without the addresses refuses, naming the missing ones, and writes nothing."""
    with pytest.raises(ValueError, match="UPSTREAM_2"):
        load_render().render(tmp_path, {"LISTEN": "80", "UPSTREAM_1": "127.0.0.1:8000"})
    assert not (tmp_path / "service.conf").exists()


class Echo(BaseHTTPRequestHandler):
    """An upstream that answers with the headers it was sent, and its own name."""

    name = ""

    def reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        seen = {key.lower(): value for key, value in self.headers.items()}
        payload = json.dumps({"server": self.name, "headers": seen, "length": len(body)}).encode()
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
    with running_nginx(nginx, prefix):
        status, headers, body = request(listen, "GET", "/healthz")
        assert status == 503
        assert headers["retry-after"] == "5"
        assert json.loads(body) == {
            "ok": False,
            "message": "The service is briefly unavailable; try again shortly.",
        }
