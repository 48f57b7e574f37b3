"""``create_app(settings)``: the one place the service is put together.

Long-lived things (database engine, group-commit writer, rate limiter) open in
``before_server_start`` and close in ``after_server_stop``; nothing is created at import.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sanic import Sanic
from sanic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

from service import admin, collector, console, cors, health, logs, proxies, shutdown, waitlist
from service.bodies import MAX_BODY_BYTES
from service.clock import Clock, epoch_seconds, utc_now
from service.connections import GuardedRequest, Registry, connection_limit
from service.db.batch import BatchWriter
from service.db.engine import Probe, create_engine
from service.db.registrations import Registration
from service.db.writer import RegistrationWriter, refused_rows, registration_writer
from service.discovery import routes as discovery_routes
from service.discovery.documents import Discovery, build_discovery
from service.handlers import JSONErrorHandler
from service.ids import IdSource, new_id
from service.keyring import Keyring, KeyringError, load_keyring
from service.metrics import Metrics
from service.ratelimit import RateLimiter
from service.readiness import Readiness
from service.settings import Settings
from service.webhooks import admin as webhook_admin
from service.webhooks import runtime, scrape, wiring
from service.webhooks.operations import Operations
from service.webhooks.ssrf import Resolve, system_resolve

App = Sanic[Config, "Context"]
Flush = Callable[[list[Registration]], Awaitable[Sequence[None] | None]]
log = logging.getLogger(__name__)
GRACEFUL_SHUTDOWN_S = 5.0
_names = itertools.count()


@dataclass
class Context:
    """What ``app.ctx`` holds; typed so handlers know what they may use."""

    settings: Settings
    clock: Clock
    run_worker: bool = False
    ids: IdSource = new_id  # for the ids the admin API makes (partners)
    metrics: Metrics = field(default_factory=Metrics)
    engine: AsyncEngine = field(init=False)
    probe: Probe = field(init=False)  # SELECT 1 within the readiness bound
    readiness: Readiness = field(default_factory=Readiness)  # the writer's last commits
    keyring: Keyring = field(init=False)  # seals and opens partner secrets (service.keyring)
    limiter: RateLimiter = field(init=False)
    admin_attempts: admin.FailedAttempts = field(init=False)  # failed admin tokens per client
    writer: RegistrationWriter = field(init=False)  # one driver call per batch
    registrations: BatchWriter[Registration, None] = field(init=False)  # the group commit in front of it
    discovery: Discovery = field(init=False)  # rendered documents; rooms_changed() after a publish
    webhooks: runtime.Webhooks = field(init=False)  # wake-up, test-delivery sender, in-process worker
    operations: Operations = field(init=False)  # the admin use cases (service.webhooks.operations)
    resolve: Resolve = system_resolve  # name resolution for partner URLs; tests swap it
    trusts_proxies: bool = False  # Sanic's proxy settings are set: client addresses from headers
    trusted_proxies: tuple[proxies.Network, ...] = ()  # ...believed only from these peers
    connections: Registry | None = None  # open connections under the cap (service.connections)


def create_app(
    settings: Settings,
    *,
    name: str | None = None,
    clock: Clock = utc_now,
    run_worker: bool = False,
    structured_logs: bool = False,
    tune_collector: bool = False,
    ids: IdSource = new_id,
    shutdown_deadline: float | None = None,
) -> App:
    """The app; ``run_worker`` also delivers webhooks from this process (``serve`` sets it).

    ``structured_logs`` routes every log line through the JSON formatter, and ``tune_collector``
    sets the garbage collector for a long-running server once it has started (``service.collector``);
    ``serve`` sets both, tests neither (pytest's own log capture, the interpreter's defaults).
    ``ids`` makes the partner ids the admin API hands out (``SeededIds`` for reproducible demo data).
    ``shutdown_deadline`` (seconds; ``serve`` sets it) ends the process that long after a stop
    begins, however the stop is going (``service.shutdown``).
    """
    if structured_logs:
        logs.configure()
    config = Config()
    config.REQUEST_MAX_SIZE = MAX_BODY_BYTES
    config.ACCESS_LOG = False
    config.FALLBACK_ERROR_FORMAT = "json"
    config.MOTD = False
    # Connections still open when a stop begins get this long; with the worker's grace for attempts
    # in flight it fits inside the shutdown deadline (service.shutdown).
    config.GRACEFUL_SHUTDOWN_TIMEOUT = GRACEFUL_SHUTDOWN_S
    # Sanic's proxy settings (SANIC_PROXIES_COUNT, SANIC_REAL_IP_HEADER, SANIC_FORWARDED_SECRET)
    # are read from the environment by Config itself; nothing else decides the client address, and
    # only from the trusted proxies (service.proxies).
    trusted = proxies.parse_networks(settings.trusted_proxies)
    refused = proxies.misconfiguration(config, trusted)
    if refused is not None:
        raise ValueError(refused)
    app: App = Sanic(
        name or f"service_{os.getpid()}_{next(_names)}",
        config=config,
        ctx=Context(settings=settings, clock=clock, run_worker=run_worker, ids=ids),
        error_handler=JSONErrorHandler(),
        request_class=GuardedRequest,
        configure_logging=not structured_logs,
    )
    app.ctx.trusted_proxies = trusted
    app.ctx.trusts_proxies = waitlist.trusts_proxies(app.config)
    # Loaded now, so a PostgreSQL database without SERVICE_SECRETS_KEY stops the start with the reason.
    app.ctx.keyring = load_keyring(settings)
    app.blueprint(health.create_blueprint())
    app.blueprint(waitlist.create_blueprint(clock))
    app.blueprint(cors.create_blueprint())
    app.blueprint(admin.create_blueprint(scrape.refresh_gauges))
    app.blueprint(webhook_admin.create_blueprint())
    unrouted: dict[str, admin.Unrouted] = {}  # who answers what routing refuses, by prefix
    if settings.admin_token:  # the console signs in with it; without one, /console is 404
        pages, unrouted[console.PATH] = console.create_blueprint(settings, clock)
        app.blueprint(pages)
    admin.guard(app, unrouted, otherwise=discovery_routes.respelled)
    # Rendered now, so a bad content file stops the start before anything is served.
    app.ctx.discovery = build_discovery(settings, clock)
    app.blueprint(discovery_routes.create_blueprint(app.ctx.discovery))

    @app.before_server_start
    async def open_resources(app: App) -> None:
        ctx: Context = app.ctx
        ctx.connections = Registry(connection_limit(settings.max_connections, run_worker))
        ctx.connections.start()
        ctx.engine = create_engine(settings.database_url, bounded=True)
        ctx.probe = Probe(ctx.engine, within=health.PROBE_WITHIN)
        try:
            await wiring.seal(ctx.engine, ctx.keyring)  # what migration 0005 moved in plaintext
        except KeyringError:
            raise  # the key of another deployment: nothing may be sealed under it
        except Exception:  # the database is down: serve anyway (/readyz says so), seal next start
            log.warning("could not check for partner secrets stored in plaintext", exc_info=True)
        ctx.limiter = RateLimiter(settings, clock=epoch_seconds(clock))
        ctx.limiter.start()
        ctx.admin_attempts = admin.FailedAttempts(ctx.limiter.storage)

        ctx.writer = registration_writer(ctx.engine)
        flush: Flush = ctx.readiness.watch(health.REGISTRATIONS, ctx.writer.write, refused=refused_rows)
        ctx.registrations = BatchWriter(flush, split=refused_rows, name="registration batch")
        ctx.registrations.start()

    @app.after_server_stop
    async def close_resources(app: App) -> None:
        ctx: Context = app.ctx
        if ctx.connections is not None:
            ctx.connections.stop()
        await ctx.registrations.close()
        await ctx.limiter.close()
        await ctx.writer.close()
        await ctx.probe.close()
        await ctx.engine.dispose()

    if tune_collector:

        @app.after_server_start
        async def settle_collector(app: App) -> None:
            collector.tune()

    # After open_resources, so its listeners find the engine open (and close before it is disposed).
    runtime.install(app)
    if shutdown_deadline is not None:
        # Registered last: Sanic runs stop listeners last-registered first, so the clock starts
        # before anything else begins to stop (the worker's grace, the connections' closing).

        @app.before_server_stop
        async def arm_deadline(app: App) -> None:
            shutdown.arm(shutdown_deadline)

    return app
