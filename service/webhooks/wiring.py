"""The delivery parts built from the settings, in one place: the keyring, the ``Sender`` and the worker.

``serve`` (``service.webhooks.runtime``), ``python -m service worker``, the partner commands, the
tests, the demo and the benchmarks all build them here, so a setting such as
``SERVICE_WEBHOOK_CONNECT_TIMEOUT`` reaches every attempt, the worker's and a test delivery's alike.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from service.clock import Clock, Timer, utc_now
from service.keyring import Keyring, KeyringError, load_keyring
from service.metrics import Metrics
from service.settings import Settings
from service.webhooks.partners import record_digests, seal_plaintext, unopened_secrets
from service.webhooks.send import Sender
from service.webhooks.ssrf import Resolve, system_resolve
from service.webhooks.worker import CONCURRENCY, DEPTH, POLL_INTERVAL, Worker

log = logging.getLogger(__name__)

# Test deliveries' pool (a worker has its own): a partner whose endpoint hangs holds at most
# TEST_CONNECTIONS_PER_HOST of it for the attempt's timeout, so tests of other partners still find a
# connection rather than time out waiting for one (aiohttp counts that wait against the connect
# timeout).
TEST_SENDER_CONNECTIONS = 32
TEST_CONNECTIONS_PER_HOST = 4


def sender(
    settings: Settings,
    *,
    clock: Clock,
    resolve: Resolve = system_resolve,
    limit: int = TEST_SENDER_CONNECTIONS,
    limit_per_host: int = TEST_CONNECTIONS_PER_HOST,
    timer: Timer = time.perf_counter,
) -> Sender:
    """A sender held to the settings' timeouts and private-address rule, with ``limit`` connections,
    ``limit_per_host`` of them to one host and port at most (0: no bound but ``limit``); ``timer``
    reads each attempt's duration."""
    return Sender(
        timeout=settings.webhook_timeout,
        connect_timeout=settings.webhook_connect_timeout,
        allow_private=settings.webhook_allow_private_urls,
        clock=clock,
        resolve=resolve,
        limit=limit,
        limit_per_host=limit_per_host,
        timer=timer,
    )


WRONG_KEY = (
    "SERVICE_SECRETS_KEY opens none of the {count} partner secrets stored in this database: give "
    "this process the key the servers and workers use (on SQLite without the setting, the key "
    "file beside the database). If every key that sealed them is lost, run python -m service "
    "secrets discard-unreadable, then rotate-secret each partner it lists."
)


async def seal(engine: AsyncEngine, keyring: Keyring, *, now: datetime | None = None) -> int:
    """Check that ``keyring`` opens the partner secrets stored, then seal under it those an earlier
    release stored in plaintext (what migration 0005 moved); how many. Every start and ``migrate``
    call it, through here only.

    A keyring that opens none of the live sealed secrets is another deployment's key, or a key
    file made afresh beside a restored database: raises ``KeyringError`` before anything is sealed
    under it, as partners onboarded or rotated under it would be signed for by no other process.
    Some unopened among others opened is a key dropped too soon: a warning, and their partners
    wait (``claim``) while everyone else is delivered. Secrets stored before their digests were
    kept get them here (``partners.record_digests``)."""
    async with engine.connect() as conn:
        stored, unopened = await unopened_secrets(conn, keyring, now=now or utc_now())
    if stored and len(unopened) == stored:
        raise KeyringError(WRONG_KEY.format(count=stored))
    if unopened:
        log.warning(
            "%d of %d partner secrets were sealed with a key SERVICE_SECRETS_KEY no longer lists; "
            "their partners are not delivered to until it is listed again",
            len(unopened),
            stored,
        )
    async with engine.begin() as conn:
        sealed = await seal_plaintext(conn, keyring)
        await record_digests(conn, keyring, now=now or utc_now())
        return sealed


async def keyring(engine: AsyncEngine, settings: Settings) -> Keyring:
    """The settings' keyring (``load_keyring``), once partner secrets an earlier release stored in
    plaintext are sealed under it."""
    found = load_keyring(settings)
    await seal(engine, found)
    return found


def worker(
    engine: AsyncEngine,
    settings: Settings,
    *,
    clock: Clock,
    keyring: Keyring | None = None,
    metrics: Metrics | None = None,
    rng: random.Random | None = None,
    resolve: Resolve = system_resolve,
    wake: asyncio.Event | None = None,
    concurrency: int = CONCURRENCY,
    depth: int = DEPTH,
    poll_interval: float = POLL_INTERVAL,
    timer: Timer = time.perf_counter,
    role: str = "worker",
) -> Worker:
    """A delivery worker with a sender of ``concurrency`` connections; ``keyring`` by default the
    settings' (``load_keyring``); ``role``: where it runs, as the roster lists it (``serve`` or
    ``worker``)."""
    return Worker(
        engine,
        settings=settings,
        clock=clock,
        # Each partner's share is its cap, kept by the lanes: the pool bounds only the whole.
        sender=sender(
            settings, clock=clock, resolve=resolve, limit=concurrency, limit_per_host=0, timer=timer
        ),
        keyring=keyring or load_keyring(settings),
        metrics=metrics,
        rng=rng,
        wake=wake,
        concurrency=concurrency,
        depth=depth,
        poll_interval=poll_interval,
        role=role,
    )
