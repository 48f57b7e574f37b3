"""The loop ``python -m service worker`` runs on follows Sanic's choice for ``serve``."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from service import eventloop


async def _which() -> str:
    return eventloop.name(asyncio.get_running_loop())


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "uvloop"),  # Sanic's default where uvloop is installed, as it is with Sanic
        ({"SANIC_USE_UVLOOP": "true"}, "uvloop"),
        ({"SANIC_USE_UVLOOP": "Yes"}, "uvloop"),
        ({"SANIC_USE_UVLOOP": "false"}, "asyncio"),
        ({"SANIC_USE_UVLOOP": "0"}, "asyncio"),
        ({"SANIC_USE_UVLOOP": "maybe"}, "asyncio"),  # Sanic keeps the text, which is not True
    ],
)
def test_the_loop_follows_sanics_setting(environ: dict[str, str], expected: str) -> None:
    assert eventloop.run(_which(), environ=environ) == expected
    assert (eventloop.factory(environ) is uvloop.new_event_loop) == (expected == "uvloop")


def test_without_uvloop_it_is_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment that left uvloop out still runs, on asyncio's own loop."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert eventloop.factory({}) is None
    assert eventloop.run(_which(), environ={}) == "asyncio"
