"""Per-client limits on the write route, kept by the ``limits`` library.

``memory://`` keeps counters in the process; ``redis://`` shares them across processes and
machines, so two server workers enforce one limit per client.

A client is what one party can hold without effort (``client_key``): an IPv4 address, or the IPv6
network of ``SERVICE_RATE_LIMIT_IPV6_PREFIX`` bits (64 by default) around an IPv6 address, since one
subscriber commonly gets a whole /64 and can rotate through it at will; an IPv4-mapped IPv6
address (``::ffff:203.0.113.7``) is the IPv4 client it maps. ``SERVICE_WAITLIST_GLOBAL_RATE_LIMIT``,
when set, is counted once more for every client together.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import ipaddress
import logging
import math
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import limits
from limits import RateLimitItem, parse_many
from limits.aio.storage import SlidingWindowCounterSupport, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from service.db.batch import BatchWriter
from service.settings import Settings

log = logging.getLogger(__name__)


def _async_storage_uri(uri: str) -> str:
    return uri if uri.startswith("async+") else f"async+{uri}"


@functools.lru_cache(maxsize=4096)  # a pure function of its arguments; addresses repeat
def client_key(address: str, ipv6_prefix: int) -> str:
    """The client an address counts as: the IPv4 address, or the IPv6 network of ``ipv6_prefix``
    bits around it (an IPv4-mapped IPv6 address counts as its IPv4 address). Anything that is not
    an address (a proxy's placeholder) counts as itself. Proxy headers give IPv6 addresses in
    brackets (Sanic's ``remote_addr``); the bracketed and bare forms are one client. A port some
    proxies add (``203.0.113.7:4000``, ``[2001:db8::1]:4000``, as RFC 7239 allows) is no part of
    the client: counted with it, every new connection would be a new client."""
    try:
        parsed = ipaddress.ip_address(_without_port(address))
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv4Address):
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    # The zone of a scoped address (fe80::1%eth0) is no part of the network.
    unscoped = ipaddress.IPv6Address(int(parsed))
    return str(ipaddress.ip_network((unscoped, ipv6_prefix), strict=False))


def _without_port(address: str) -> str:
    """``address`` without its brackets and port: ``[v6]:port`` and ``v4:port`` (one colon); a
    bare IPv6 address has more than one colon and no port."""
    if address.startswith("["):
        return address[1:].partition("]")[0]
    host, colon, port = address.partition(":")
    return host if colon and port.isdigit() and ":" not in port else address


OVERFLOW = "overflow"  # the key every newcomer shares while the in-memory store is full


def _scope(key: str) -> str:
    """The scope of a limits key (``LIMITER/scope/...``; a scope holds no slash, a client may: an
    IPv6 network)."""
    parts = key.split("/", 2)
    return parts[1] if len(parts) > 2 else ""


def _overflow_key(key: str, limit: int, expiry: int) -> str:
    """The overflow counter of ``key``'s scope and limit."""
    return f"{OVERFLOW}/{_scope(key)}/{limit}/{expiry}"


class WindowCounters(Storage, SlidingWindowCounterSupport):
    """``memory://`` for limits' sliding-window counter: expiry that costs the same at any scale.

    limits' own asyncio ``MemoryStorage`` sweeps every counter it holds on each turn of the event
    loop that follows a hit, so a hit's cost grows with the number of clients seen in the last
    window (``python -m benchmarks.ratelimit``: 6.4 µs a hit with 1,000 clients, 64 µs with 10,000,
    184 µs with 50,000), a cost anyone rotating source addresses could raise. Here each counter
    goes onto a heap by its expiry once, when it is created, and every write first drops the
    counters whose time has passed from the top of the heap: O(log n) a hit, and memory bounded by
    the clients of the last two windows.

    Everything runs on the event loop's thread and no method awaits between reading a counter
    and writing it, so no other request can interleave and no lock is needed. The arithmetic is
    limits' own, so the decisions are the library storage's (a test holds the two to each other).
    It is a custom storage as limits documents them, registered under its own URI scheme
    (``WINDOW_COUNTERS_URI``), which ``RateLimiter`` asks for in place of ``memory://``.

    It holds at most about ``max_counters`` counters (``SERVICE_RATE_LIMIT_MEMORY_CLIENTS`` clients
    at two counters per limit each). When it is full, a client it does not already count is
    counted in one overflow counter per limit that every such newcomer shares, until expiry makes
    room. Clients already counted keep their own counters (a flood of new addresses never resets
    anyone's count, as evicting the oldest would), memory stays bounded whatever the flood (at
    most three times ``max_counters``: a client may hold a counter of the window before the
    previous one until it expires), and the flood is held to one client's allowance in all, so
    the limit fails closed: newcomers wait, nobody gets through unlimited.
    """

    # limits' registry reads the schemes from this class attribute when the class is defined.
    STORAGE_SCHEME = ["async+window-counters"]  # noqa: RUF012 - limits declares it a plain attribute

    def __init__(
        self,
        uri: str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        wrap_exceptions: bool = False,
        max_counters: int | None = None,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self._clock = clock
        self.max_counters = max_counters  # None: unbounded
        self.overflowed = 0  # hits counted in an overflow counter, for tests and logs
        self._counts: dict[str, int] = {}
        self._expires: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (expires at, key), one entry per counter created
        # The overflow counter newcomers share, by (scope, window): where a newcomer refused on it
        # reads how long to wait. One per limit, however many newcomers.
        self._overflows: dict[tuple[str, int], str] = {}

    @property
    def base_exceptions(self) -> type[Exception]:
        return ValueError

    @staticmethod
    def window_keys(key: str, expiry: int, at: float) -> tuple[str, str]:
        """The previous and the current window's counters: ``key`` and the window's number."""
        return f"{key}/{int((at - expiry) / expiry)}", f"{key}/{int(at / expiry)}"

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            expires, key = heapq.heappop(heap)
            if self._expires.get(key) == expires:  # not cleared and created again since
                del self._expires[key]
                del self._counts[key]

    def _count(self, key: str, now: float) -> int:
        if self._expires.get(key, 0.0) <= now:
            return 0
        return self._counts[key]

    def _add(self, key: str, expiry: float, amount: int, now: float) -> int:
        self._expire(now)  # afterwards every counter left is live
        if key in self._counts:
            self._counts[key] += amount
        else:
            expires = now + expiry
            self._counts[key] = amount
            self._expires[key] = expires
            heapq.heappush(self._heap, (expires, key))
        return self._counts[key]

    def _window(
        self, previous_key: str, current_key: str, expiry: int, now: float
    ) -> tuple[int, float, int, float]:
        previous_count = self._count(previous_key, now)
        current_count = self._count(current_key, now)
        previous_ttl = (1 - (((now - expiry) / expiry) % 1)) * expiry if previous_count else 0.0
        current_ttl = (1 - ((now / expiry) % 1)) * expiry + expiry
        return previous_count, previous_ttl, current_count, current_ttl

    def acquire(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """``acquire_sliding_window_entry`` without a coroutine: ``RateLimiter`` calls this directly."""
        if amount > limit:
            return False
        now = self._clock()
        previous_key, current_key = self.window_keys(key, expiry, now)
        counts = self._counts
        if self.max_counters is not None and current_key not in counts and previous_key not in counts:
            self._expire(now)
            if len(counts) >= self.max_counters:  # full: a newcomer shares the overflow counter
                if not self.overflowed:
                    log.warning("rate-limit store full: new clients share one counter until room is made")
                self.overflowed += 1
                shared = self._overflows[_scope(key), expiry] = _overflow_key(key, limit, expiry)
                previous_key, current_key = self.window_keys(shared, expiry, now)
        previous_count, previous_ttl, current_count, _ = self._window(
            previous_key, current_key, expiry, now
        )
        if math.floor(previous_count * previous_ttl / expiry + current_count) + amount > limit:
            return False
        # Twice the window, as limits does: the counter is still the previous window's next time.
        self._add(current_key, 2 * expiry, amount, now)
        return True

    async def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        return self.acquire(key, limit, expiry, amount)

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        now = self._clock()
        previous_key, current_key = self.window_keys(key, expiry, now)
        shared = self._overflows.get((_scope(key), expiry))
        if shared is not None and self._count(previous_key, now) == self._count(current_key, now) == 0:
            # Not counted on its own (a newcomer while the store was full): it was counted, and
            # refused, on the overflow counter, whose window is the one to wait for.
            previous_key, current_key = self.window_keys(shared, expiry, now)
        return self._window(previous_key, current_key, expiry, now)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        for window_key in self.window_keys(key, expiry, self._clock()):
            await self.clear(window_key)

    async def incr(self, key: str, expiry: float, amount: int = 1) -> int:
        return self._add(key, expiry, amount, self._clock())

    async def get(self, key: str) -> int:
        return self._count(key, self._clock())

    async def get_expiry(self, key: str) -> float:
        return self._expires.get(key, self._clock())

    async def check(self) -> bool:
        return True

    async def reset(self) -> int | None:
        held = len(self._counts)
        self._overflows.clear()
        self._counts.clear()
        self._expires.clear()
        self._heap.clear()
        return held

    async def clear(self, key: str) -> None:
        self._counts.pop(key, None)
        self._expires.pop(key, None)  # its heap entry no longer matches and is skipped

    def __len__(self) -> int:
        """Counters held, live or awaiting their turn to be dropped."""
        return len(self._counts)


WINDOW_COUNTERS_URI = "async+window-counters://"
GLOBAL_CLIENT = "*"  # the one client SERVICE_WAITLIST_GLOBAL_RATE_LIMIT counts

# BatchedHits reads limits' internals: they were proven on this version, which pyproject.toml
# pins exactly, and tests/test_ratelimit.py fails, naming the one that moved, on any other.
LIMITS_VERSION = "5.8.0"
# limits' acquire_sliding_window.lua as of that version, by its SHA-1 (as Redis names scripts).
SLIDING_WINDOW_SCRIPT_SHA1 = "e8ac2a60cb040b0dbb56815a1e9c6fd032ce62e7"

# limits' sliding-window script, run once per hit of a batch inside one script call. The script
# reads its keys and arguments from KEYS and ARGV; as the parameters of a local function those
# names are each hit's own.
_BATCH_SCRIPT = """
local function acquire(KEYS, ARGV)
{script}
end
local acquired = {{}}
for n = 1, #KEYS / 2 do
    local hit = acquire({{KEYS[2 * n - 1], KEYS[2 * n]}}, {{ARGV[3 * n - 2], ARGV[3 * n - 1], ARGV[3 * n]}})
    acquired[n] = hit and 1 or 0
end
return acquired
"""


class LimitsInternalsMoved(RuntimeError):
    """limits no longer has, as it had in ``LIMITS_VERSION``, an internal that ``BatchedHits`` reads."""


def _limits_internals(storage: Storage) -> tuple[Any, str]:
    """limits' redis-py bridge and sliding-window script text, as proven on ``LIMITS_VERSION``.

    Raises ``LimitsInternalsMoved``, naming what moved, rather than counting hits any other way.
    """
    bridge = getattr(storage, "bridge", None)
    script = getattr(getattr(bridge, "lua_acquire_sliding_window", None), "script", None)
    wanted = {
        "RedisStorage.bridge": bridge is not None,
        "RedisStorage._current_window_key": callable(getattr(storage, "_current_window_key", None)),
        "RedisStorage._previous_window_key": callable(getattr(storage, "_previous_window_key", None)),
        "RedispyBridge.prefixed_key": callable(getattr(bridge, "prefixed_key", None)),
        "RedispyBridge.get_connection": callable(getattr(bridge, "get_connection", None)),
        "RedispyBridge.lua_acquire_sliding_window.script": isinstance(script, str | bytes),
    }
    missing = [name for name, present in wanted.items() if not present]
    text = script.decode() if isinstance(script, bytes) else str(script)
    # SHA-1 is how Redis itself names a script; nothing here depends on it resisting collisions.
    if not missing and hashlib.sha1(text.encode()).hexdigest() != SLIDING_WINDOW_SCRIPT_SHA1:  # noqa: S324
        missing.append("acquire_sliding_window.lua (its text changed)")
    if missing:
        raise LimitsInternalsMoved(
            f"service.ratelimit.BatchedHits reads limits {LIMITS_VERSION}'s internal "
            f"{', '.join(missing)}, which limits {limits.__version__} no longer has as it was; "
            "pin limits back, or prove BatchedHits on this version (tests/test_ratelimit.py, "
            "python -m benchmarks.ratelimit --redis URL) and move LIMITS_VERSION and the pin"
        )
    return bridge, text


class BatchedHits:
    """Hits on limits' Redis storage, sent to Redis together: one script call for many hits.

    limits makes one ``EVALSHA`` round trip per hit, and redis-py's asyncio client spends about
    90 to 120 µs of CPU on each call, whatever it carries (measured here). Hits queue while a call is
    out (the group commit of ``service.db.batch``), so a lone hit goes at once and a busy server
    sends many together, as one call of limits' own sliding-window script wrapped in a loop over
    the hits: 21 µs a hit at 8 hits a call, 9 µs at 32 (a pipeline of one ``EVALSHA`` per hit cost
    21 µs at 32; ``python -m benchmarks.ratelimit --redis URL`` measures it). The keys and arguments
    are exactly the ones limits' ``acquire_sliding_window_entry`` sends, so counters are shared with
    any process hitting through limits itself (a test holds the two to each other).

    limits offers no public way to send many hits in one call, so this reads its internals (its
    redis-py client, script and key layout); ``_limits_internals`` refuses to start without them.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage: Any = storage
        self._bridge, text = _limits_internals(storage)
        # redis-py's Script loads the script again when Redis answers NOSCRIPT (after a restart).
        self._script: Any = self._bridge.get_connection().register_script(
            _BATCH_SCRIPT.format(script=text)
        )
        self._batch: BatchWriter[tuple[str, int, int], bool] = BatchWriter(
            self._send, name="rate-limit hits"
        )

    def start(self) -> None:
        self._batch.start()

    async def close(self) -> None:
        await self._batch.close()

    async def acquire(self, key: str, limit: int, expiry: int) -> bool:
        return bool(await self._batch.submit((key, limit, expiry)))

    async def _send(self, hits: list[tuple[str, int, int]]) -> list[bool]:
        prefixed, storage = self._bridge.prefixed_key, self._storage
        keys: list[str] = []
        args: list[int] = []
        for key, limit, expiry in hits:
            keys += (prefixed(storage._previous_window_key(key)), prefixed(storage._current_window_key(key)))
            args += (limit, expiry, 1)
        acquired = await self._script(keys=keys, args=args)
        return [bool(flag) for flag in acquired]


class RateLimiter:
    """A sliding window per (scope, client): no burst of twice the limit at a window edge.

    The sliding-window counter weighs the previous window's count by how much of it still
    overlaps; it keeps two counters per client instead of one timestamp per request, which makes
    it several times cheaper than an exact moving window at the same protection.
    """

    def __init__(self, settings: Settings, scope: str = "waitlist") -> None:
        self.items: list[RateLimitItem] = parse_many(settings.waitlist_rate_limit)
        global_limit = settings.waitlist_global_rate_limit
        self.global_items: list[RateLimitItem] = parse_many(global_limit) if global_limit else []
        self.scope = scope
        self.global_scope = f"{scope}-all"
        self.ipv6_prefix = settings.rate_limit_ipv6_prefix
        uri = _async_storage_uri(settings.rate_limit_storage)
        options: dict[str, Any] = {}
        if uri.startswith("async+memory://"):
            uri = WINDOW_COUNTERS_URI
            options["max_counters"] = 2 * settings.rate_limit_memory_clients * len(self.items)
        elif "redis" in uri:
            options["key_prefix"] = settings.rate_limit_key_prefix
            # redis-py's asyncio client: measured here at ~78 µs of client CPU per hit against
            # ~95 µs for coredis (limits' default), on the same sliding-window script.
            options["implementation"] = "redispy"
        try:
            storage = storage_from_string(uri, **options)
        except ConfigurationError:  # its message quotes the URL, password and all
            raise ValueError("SERVICE_RATE_LIMIT_STORAGE cannot be read as a storage URL") from None
        assert isinstance(storage, Storage)  # the async+ scheme always builds an async storage
        self.storage = storage
        self.strategy = SlidingWindowCounterRateLimiter(self.storage)
        # In process, the strategy's one call to the storage is made directly, without the three
        # coroutines between (measured: 4.4 to 3.2 µs a hit alone; inside the server, 126 to 116 µs
        # of CPU a registration).
        self._counters = storage if isinstance(storage, WindowCounters) else None
        # One Redis server (redis://, rediss://); sentinel and cluster keep limits' own calls.
        single = urllib.parse.urlsplit(uri).scheme in ("async+redis", "async+rediss")
        self._batched = BatchedHits(storage) if single else None

    def start(self) -> None:
        """Within the running loop: start the task that sends batched hits, where there is one."""
        if self._batched is not None:
            self._batched.start()

    async def close(self) -> None:
        if self._batched is not None:
            await self._batched.close()

    async def hit(self, address: str) -> int | None:
        """Count one request from ``address``; the seconds to wait when it is over a limit (its
        client's, or the global one), else None."""
        client = client_key(address, self.ipv6_prefix)
        counters = self._counters
        if counters is not None and not self.global_items:
            # In process and per client only (the default): no coroutine between the route and
            # the counters, as every registration pays for it.
            for item in self.items:
                if not counters.acquire(item.key_for(self.scope, client), item.amount, item.get_expiry()):
                    stats = await self.strategy.get_window_stats(item, self.scope, client)
                    return max(1, math.ceil(stats.reset_time - time.time()))
            return None
        wait = await self._hit(self.items, self.scope, client)
        if wait is None and self.global_items:
            wait = await self._hit(self.global_items, self.global_scope, GLOBAL_CLIENT)
        return wait

    async def _hit(self, items: list[RateLimitItem], scope: str, client: str) -> int | None:
        counters, batched = self._counters, self._batched
        for item in items:
            if counters is not None:
                allowed = counters.acquire(item.key_for(scope, client), item.amount, item.get_expiry())
            elif batched is not None:
                key = item.key_for(scope, client)
                allowed = await batched.acquire(key, item.amount, item.get_expiry())
            else:
                try:
                    allowed = await self.strategy.hit(item, scope, client)
                except Exception:
                    log.warning("rate-limit hit failed", exc_info=True)
                    raise
            if not allowed:
                stats = await self.strategy.get_window_stats(item, scope, client)
                return max(1, math.ceil(stats.reset_time - time.time()))
        return None

    async def ping(self) -> bool:
        return bool(await self.storage.check())

    async def ready(self) -> bool:
        """Whether the counters' store answers now (the server's /readyz); never raises."""
        try:
            return bool(await self.storage.check())
        except Exception:
            return False

    async def reset(self) -> None:
        await self.storage.reset()
