"""The event loop the service's long-running processes run on: the one Sanic picks for ``serve``.

Sanic runs ``serve`` (and the delivery worker inside it) on uvloop where uvloop is installed, which
it is with Sanic, unless ``SANIC_USE_UVLOOP`` is false. ``python -m service worker`` follows the
same rule through ``run``, so a worker delivers on the same loop in either place. On uvloop the
worker drained a backlog 4-10 % faster, at 5-9 % less CPU a delivery, than on asyncio's own loop
(``benchmarks/delivery.py --like-for-like`` on PostgreSQL; it runs both sides on the loop named here).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from sanic.utils import str_to_bool

T = TypeVar("T")
Factory = Callable[[], asyncio.AbstractEventLoop]


def factory(environ: Mapping[str, str] | None = None) -> Factory | None:
    """uvloop's loop factory, or None for asyncio's own loop: as Sanic decides, uvloop unless
    ``SANIC_USE_UVLOOP`` is set to something other than true, or uvloop is not installed."""
    setting = (os.environ if environ is None else environ).get("SANIC_USE_UVLOOP")
    if setting is not None and not _true(setting):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _true(setting: str) -> bool:
    try:
        return str_to_bool(setting)  # how Sanic's config reads its environment
    except ValueError:
        return False  # Sanic keeps the text, which is not True: asyncio's loop


def name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop ``loop`` is, for a log line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], *, environ: Mapping[str, str] | None = None) -> T:
    """``asyncio.run(main)`` on the loop ``factory`` names."""
    with asyncio.Runner(loop_factory=factory(environ)) as runner:
        return runner.run(main)
