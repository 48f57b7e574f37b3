"""docs/deploy.md, run as a newcomer would: its commands in order, from no database to a delivered event."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.cluster import clean_environment, scratch_backends, stop_group
from tests.processes import ROOT, free_port
from tests.tools import require_tool
from tests.webhook_helpers import Receiver

GUIDE = ROOT / "docs" / "deploy.md"
# The blocks the guide marks as the recipe (```sh run); the others are for a real machine (root, systemd).
RUN_BLOCK = re.compile(r"^```sh run\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def recipe() -> list[str]:
    return RUN_BLOCK.findall(GUIDE.read_text())


def test_the_guide_marks_its_recipe_from_the_names_to_the_check() -> None:
    """The recipe starts with the names it uses, creates the database, migrates, starts servers and a worker."""
    blocks = recipe()
    assert "DATABASE=" in blocks[0] and "SERVERS=" in blocks[0]
    steps = [
        "createdb",
        "Fernet.generate_key",
        "service.env",
        "service migrate",
        "serve --no-worker",
        "service worker",
    ]
    found = [next(index for index, block in enumerate(blocks) if step in block) for step in steps]
    assert found == sorted(found)
    assert "SANIC_PROXIES_COUNT=1" in "".join(blocks)


def test_the_guides_commands_in_order_reach_a_delivered_event(tmp_path: Path) -> None:
    """Every `sh run` block of docs/deploy.md, with this machine's names, ends with the event delivered."""
    for tool in ("createdb", "curl"):
        require_tool(tool, "docs/deploy.md's commands use it")
    blocks = recipe()
    with scratch_backends(create=False) as backends, Receiver() as receiver:
        servers = (free_port(), free_port())  # picked once the receiver holds its own port
        url = make_url(backends.database_url)
        # This machine's values for the names of step 1, set right after the guide's own.
        names = "\n".join(
            [
                f"export PGHOST={url.host} PGPORT={url.port or 5432} PGUSER={url.username}",
                f"DATABASE={url.database}",
                f"REDIS={backends.redis_url}",
                f"PUBLIC=http://127.0.0.1:{free_port()}",
                f'SERVERS="{servers[0]} {servers[1]}"',
                f"WORKER_PORT={free_port()}",
                f"PARTNER_URL={receiver.url()}",
            ]
        )
        script = "\n".join(["set -e", blocks[0], names, *blocks[1:]])
        env = {
            **clean_environment(),
            "SERVICE_RATE_LIMIT_KEY_PREFIX": backends.key_prefix,
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",  # the partner is a receiver on loopback
        }
        if url.password:
            env["PGPASSWORD"] = url.password
        log = tmp_path / "guide.log"
        with open(log, "wb") as out:
            shell = subprocess.Popen(
                ["bash", "-c", script],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the servers and the worker it starts stay in its group
            )
        try:
            assert shell.wait(timeout=180) == 0, log.read_text()[-3000:]
            assert receiver.wait_for(lambda seen: len(seen) == 1, timeout=10)
            assert b'"event":"room.claimed"' in receiver.requests[0].body.replace(b" ", b"")
        finally:
            stop_group(shell)
