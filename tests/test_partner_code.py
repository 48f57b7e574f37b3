"""The code partners copy from the served verification page runs on its own, in Python and in Node.js.

Every code block is taken from the served page and run as a partner would: Python in isolated mode
from a folder outside the checkout (so the project cannot be imported), Node.js with its standard
library only. Each reaches every served test vector's verdict, fetched from the running service, and
accepts a real signed delivery while refusing it changed or under another secret.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import Receiver, drain, onboard, publish, room_claimed, settings

import tests.conftest as conftest
from service.clock import ManualClock
from tests.tools import require_tool

PAGE = "/docs/webhooks/verifying-signatures.md"
VECTORS = "/api/v1/webhooks/test-vectors"
# The packages the page tells partners to install; everything else must be the standard library.
PYTHON_PACKAGES = {"standardwebhooks"}
NODE_PACKAGES: set[str] = set()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
ALL_AS_EXPECTED = re.compile(r"^(\d+) test vectors, both schemes: every verdict as expected$", re.MULTILINE)

PYTHON_DRIVER = """

# --- the test's driver, appended after the page's blocks ---
import importlib.util as _util
import sys as _sys
import threading as _threading
import urllib.error as _error
import urllib.request as _request

_deliveries = json.load(open(_sys.argv[1]))
_results = []
_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhooks)
_threading.Thread(target=_server.serve_forever, daemon=True).start()
for _delivery in _deliveries:
    _body = _delivery["body"].encode()
    SECRETS[:] = _delivery["secrets"]
    _post = _request.Request(
        f"http://127.0.0.1:{_server.server_address[1]}/", data=_body, headers=_delivery["headers"]
    )
    try:
        _status = _request.urlopen(_post).status
    except _error.HTTPError as _refused:
        _status = _refused.code
    _results.append(
        {
            "x-service-signature": verify(_delivery["headers"], _body, _delivery["secrets"], _delivery["now"]),
            "webhook-signature": verify_standard(_delivery["headers"], _body, _delivery["secrets"], _delivery["now"]),
            "standardwebhooks": verify_with_library(_body, _delivery["headers"], _delivery["secrets"][0]) is not None,
            "receiver": _status,
        }
    )
_server.shutdown()
print("DRIVER " + json.dumps({"results": _results, "project": _util.find_spec("service") is not None}))
"""

NODE_DRIVER = """

// --- the test's driver, appended after the page's block ---
const deliveries = JSON.parse(require("node:fs").readFileSync(process.argv[2], "utf8"));
const results = deliveries.map((delivery) => {
  const body = Buffer.from(delivery.body, "utf8");
  return {
    "x-service-signature": verify(delivery.headers, body, delivery.secrets, delivery.now),
    "webhook-signature": verifyStandard(delivery.headers, body, delivery.secrets, delivery.now),
  };
});
console.log("DRIVER " + JSON.stringify({ results }));
"""


@pytest.fixture
def clock() -> ManualClock:
    """The service's clock at the real time: the Standard Webhooks library checks against the system clock."""
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


def _blocks(markdown: str, *languages: str) -> list[str]:
    return [code for language, code in FENCE.findall(markdown) if language in languages]


def _python_imports(code: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _node_requires(code: str) -> set[str]:
    return set(re.findall(r"""require\(\s*["']([^"']+)["']\s*\)""", code))


def _installed(folder: Path, packages: set[str]) -> str:
    """A folder holding only ``packages`` (as ``pip install`` would), and the line putting it on sys.path."""
    folder.mkdir()
    for name in packages:
        module = importlib.import_module(name)
        assert module.__file__ is not None
        (folder / name).symlink_to(Path(module.__file__).parent)
    return f"import sys\nsys.path.append({str(folder)!r})\n\n"


def _run(client: Any, *command: str, cwd: Path) -> str:
    """Run ``command`` while the test server's loop serves its requests; its output, or a failure."""

    async def go() -> tuple[int, bytes, bytes]:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, out, err

    code, out, err = client.run(go())
    assert code == 0, err.decode()
    return out.decode()


def _driver_results(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("DRIVER "))
    result: dict[str, Any] = json.loads(line.removeprefix("DRIVER "))
    return result


@pytest.fixture
def served(make_client, monkeypatch, tmp_path: Path) -> Any:
    """The service on a known loopback port (its base URL), a real delivery it signed, and the page."""
    port = conftest.free_port()
    # The page's code fetches the vectors from the base URL, so the server takes the port it names
    # (patched where make_client's Client looks it up, which must name it so).
    names = make_client.__wrapped__.__globals__
    assert "free_port" in names, "make_client's Client no longer picks its port with free_port"
    monkeypatch.setitem(names, "free_port", lambda: port)
    with Receiver() as receiver, make_client(**settings(base_url=f"http://127.0.0.1:{port}")) as client:
        partner = onboard(client, receiver.url())
        other = onboard(client, receiver.url(path="/other"))
        publish(client, room_claimed("copied"))
        drain(client)
        (received,) = receiver.to("/hook")
        genuine = {
            "headers": received.headers,
            "body": received.body.decode(),
            "secrets": [partner["secret"]],
            "now": client.app.ctx.clock().timestamp(),  # when the service signed it
        }
        deliveries = [
            genuine,
            {**genuine, "body": genuine["body"].replace('"copied"', '"changed"')},
            {**genuine, "secrets": [other["secret"]]},
        ]
        (tmp_path / "deliveries.json").write_text(json.dumps(deliveries))
        page = client.get(PAGE)
        assert page.status_code == 200
        vectors = client.get(VECTORS).json
        yield client, page.text, vectors


EXPECTED = [True, False, False]  # the genuine delivery, its body changed, checked with another secret


def test_python_blocks_run_alone_and_reach_every_verdict(served, tmp_path: Path):
    """The page's Python, run in isolated mode outside the checkout, checks every served vector and a real delivery."""
    client, page, vectors = served
    blocks = _blocks(page, "python")
    assert len(blocks) >= 4
    for block in blocks:
        foreign = _python_imports(block) - set(sys.stdlib_module_names) - PYTHON_PACKAGES
        assert not foreign, f"a block imports {foreign}, which the page does not name"
    assert "standardwebhooks" in page  # the one package named
    script = tmp_path / "verify.py"
    script.write_text(_installed(tmp_path / "packages", PYTHON_PACKAGES) + "\n\n".join(blocks) + PYTHON_DRIVER)
    # -I: no PYTHONPATH, no user site, no script folder; -S: not even the environment's site-packages,
    # where the project is installed: only the standard library and the packages the page names.
    output = _run(
        client, sys.executable, "-I", "-S", str(script), str(tmp_path / "deliveries.json"), cwd=tmp_path
    )
    counted = ALL_AS_EXPECTED.search(output)
    assert counted is not None, output
    assert int(counted.group(1)) == len(vectors["cases"])
    driven = _driver_results(output)
    assert driven["project"] is False  # the project's packages were out of reach
    assert driven["results"] == [
        {
            "x-service-signature": accept,
            "webhook-signature": accept,
            "standardwebhooks": accept,
            "receiver": 204 if accept else 401,
        }
        for accept in EXPECTED
    ]


def test_node_block_runs_alone_and_reaches_every_verdict(served, tmp_path: Path):
    """The page's Node.js verifier, with node's standard library only, checks every served vector and a real delivery."""
    node = require_tool("node", "partners verify in Node.js too")
    client, page, vectors = served
    blocks = _blocks(page, "javascript", "js")
    assert len(blocks) == 1
    requires = _node_requires(blocks[0])
    assert requires
    assert all(name.startswith("node:") or name in NODE_PACKAGES for name in requires), requires
    script = tmp_path / "verify.js"
    script.write_text(blocks[0] + NODE_DRIVER)
    output = _run(client, node, str(script), str(tmp_path / "deliveries.json"), cwd=tmp_path)
    counted = ALL_AS_EXPECTED.search(output)
    assert counted is not None, output
    assert int(counted.group(1)) == len(vectors["cases"])
    assert _driver_results(output)["results"] == [
        {"x-service-signature": accept, "webhook-signature": accept} for accept in EXPECTED
    ]
