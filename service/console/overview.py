"""``/console``: what needs attention first, then registrations and the last day's deliveries."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from service.console import charts
from service.console.pages import Console
from service.summaries_ops import INTENTS
from service.webhooks import roster


def _worker_turn(request: Request) -> float | None:
    """Seconds since this process's own worker loop last turned; None without one."""
    worker = getattr(request.app.ctx.webhooks, "worker", None)
    last: float | None = getattr(worker, "last_turn", None)
    return round(time.monotonic() - last, 1) if last is not None else None


def register(bp: Blueprint, console: Console) -> None:
    @bp.get("/")
    async def overview(request: Request) -> HTTPResponse:
        operations = console.operations(request)
        partners: list[dict[str, Any]] = (await operations.list_partners())["partners"]
        stats = await operations.outbox_stats()
        workers = await operations.workers()
        now = console.clock()
        summary = await console.summaries(request).overview()
        names = {partner["id"]: partner["name"] for partner in partners}
        oldest: tuple[datetime, str] | None = None
        for partner_id, waiting in stats.by_partner.items():
            if waiting.oldest is not None and (oldest is None or waiting.oldest < oldest[0]):
                oldest = (waiting.oldest, partner_id)
        return console.render(
            request,
            "overview.html",
            title="Overview",
            open_circuits=[p for p in partners if p["circuit"] == "open"],
            disabled=[p for p in partners if p["status"] == "disabled"],
            paused=[p for p in partners if p["status"] == "paused"],
            failed=sorted(summary["failed"].items()),
            names=names,
            oldest=oldest,
            now=now,
            waiting=sum(stats.by_status.values()),
            worker_turn=_worker_turn(request),
            workers=workers,
            silent=[worker for worker in workers if worker.silent(now)],
            heartbeat=int(roster.HEARTBEAT.total_seconds()),
            intents=INTENTS,
            registrations=summary["registrations"],
            daily=summary["daily"],
            day_bars={
                intent: charts.bars([(day.isoformat(), count) for day, count in days])
                for intent, days in summary["daily"].items()
            },
            deliveries=sorted(summary["deliveries"].items()),
        )
