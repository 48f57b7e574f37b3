"""Per-client limits on the write route, kept by the ``limits`` library.

``memory://`` keeps counters in the process; ``redis://`` shares them across processes and
machines, so two server workers enforce one limit per client.

A client is what one party can hold without effort (``client_key``): an IPv4 address, or the IPv6
network of ``SERVICE_RATE_LIMIT_IPV6_PREFIX`` bits (64 by default) around an IPv6 address, since one
subscriber commonly gets a whole /64 and can rotate through it at will; an IPv4-mapped IPv6
address (``::ffff:203.0.113.7``) is the IPv4 client it maps. ``SERVICE_WAITLIST_GLOBAL_RATE_LIMIT``,
when set, is counted once more for every client together.

A request counts against all of its limits or none: one refused by any limit (its client's, the
global one) spends nothing of the others, so a client refused only while the global limit was
spent is let in as soon as that limit has room again, and a client over its own limit spends
nothing of everyone's. In process the limits are tested, then counted, with nothing in between;
on one Redis server one script call does the same, atomically, in the one round trip a request
already took (``BatchedHits``).
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
from collections.abc import Callable, Sequence
from typing import Any, cast

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

    def _counters_of(self, key: str, limit: int, expiry: int, now: float) -> tuple[str, str]:
        """The previous and the current window's counters a hit on ``key`` counts in: its own, or
        while the store is full and it holds none, the overflow counter its newcomers share."""
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
        return previous_key, current_key

    def _room(
        self, previous_key: str, current_key: str, limit: int, expiry: int, amount: int, now: float
    ) -> bool:
        """Whether ``amount`` more hits fit under ``limit`` in these counters now (limits' arithmetic)."""
        previous_count, previous_ttl, current_count, _ = self._window(previous_key, current_key, expiry, now)
        return math.floor(previous_count * previous_ttl / expiry + current_count) + amount <= limit

    def acquire(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """``acquire_sliding_window_entry`` without a coroutine: ``RateLimiter`` calls this directly."""
        if amount > limit:
            return False
        now = self._clock()
        previous_key, current_key = self._counters_of(key, limit, expiry, now)
        if not self._room(previous_key, current_key, limit, expiry, amount, now):
            return False
        # Twice the window, as limits does: the counter is still the previous window's next time.
        self._add(current_key, 2 * expiry, amount, now)
        return True

    def acquire_all(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """One hit on each ``(key, limit, expiry)`` of ``hits`` (one request's limits), all or none:
        None when every limit has room, and each counts it; else the index of the first without,
        and none counts it. Nothing awaits between the tests and the counting."""
        now = self._clock()
        counted: list[tuple[str, int]] = []
        for at, (key, limit, expiry) in enumerate(hits):
            previous_key, current_key = self._counters_of(key, limit, expiry, now)
            if not self._room(previous_key, current_key, limit, expiry, 1, now):
                return at
            counted.append((current_key, expiry))
        for current_key, expiry in counted:
            self._add(current_key, 2 * expiry, 1, now)
        return None

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
# names are each hit's own. The hits come grouped by request: ARGV holds, for each request, the
# number of its hits and then each hit's (limit, expiry, amount); KEYS each hit's previous and
# current window's counters. A request's hits are counted all or none: once one is refused, the
# hits of that request already counted are taken back (the counter that one created deleted, the
# others decremented; a window shifted on the way stays shifted, as the next read would shift it),
# and the request's answer is the refused hit's number, 0 when all were counted.
_BATCH_SCRIPT = """
local function acquire(KEYS, ARGV)
{script}
end
local answers = {{}}
local k, a = 0, 1
while a <= #ARGV do
    local hits = tonumber(ARGV[a])
    local refused = 0
    local counted = {{}}
    for h = 1, hits do
        local current, at = KEYS[k + 2 * h], a + 3 * h - 2
        local existed = redis.call('exists', current) == 1
        if acquire({{KEYS[k + 2 * h - 1], current}}, {{ARGV[at], ARGV[at + 1], ARGV[at + 2]}}) then
            counted[#counted + 1] = {{current, existed, ARGV[at + 2]}}
        else
            refused = h
            break
        end
    end
    if refused > 0 then
        for _, hit in ipairs(counted) do
            if hit[2] then
                redis.call('decrby', hit[1], hit[3])
            else
                redis.call('del', hit[1])
            end
        end
    end
    answers[#answers + 1] = refused
    k = k + 2 * hits
    a = a + 1 + 3 * hits
end
return answers
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
    the requests and each one's hits, which it counts all or none (``_BATCH_SCRIPT``): 21 µs a hit
    at 8 hits a call, 9 µs at 32 (a pipeline of one ``EVALSHA`` per hit cost
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
        # One item per request: its hits, (key, limit, expiry) each.
        self._batch: BatchWriter[tuple[tuple[str, int, int], ...], int] = BatchWriter(
            self._send, name="rate-limit hits"
        )

    def start(self) -> None:
        self._batch.start()

    async def close(self) -> None:
        await self._batch.close()

    async def acquire(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """One hit on each ``(key, limit, expiry)`` of ``hits`` (one request's limits), all or none:
        None when each counted it; else the index of the first that refused, and none counted it."""
        refused = await self._batch.submit(tuple(hits))
        return refused - 1 if refused else None

    async def _send(self, requests: list[tuple[tuple[str, int, int], ...]]) -> list[int]:
        prefixed, storage = self._bridge.prefixed_key, self._storage
        keys: list[str] = []
        args: list[int] = []
        for hits in requests:
            args.append(len(hits))
            for key, limit, expiry in hits:
                keys += (
                    prefixed(storage._previous_window_key(key)),
                    prefixed(storage._current_window_key(key)),
                )
                args += (limit, expiry, 1)
        refused = await self._script(keys=keys, args=args)
        return [int(number) for number in refused]


def until_room(
    limit: int, expiry: int, previous_count: int, previous_ttl: float, current_count: int, current_ttl: float
) -> float:
    """Seconds until one more hit fits a sliding-window counter (a storage's ``get_sliding_window``:
    the counts and times to live of the previous and the current window), 0 if one fits now.

    limits' arithmetic: a hit fits while ``floor(previous_count * previous_ttl / expiry +
    current_count) + 1 <= limit``, that is while the weighted count is below ``limit``; the previous
    window's weight falls as the current window runs out (``previous_ttl`` is what is left of it),
    and at its end the current window becomes the previous one."""
    left = current_ttl - expiry if current_count else previous_ttl  # of the current window
    if current_count < limit:
        if not previous_count:
            return 0.0
        # The previous window's weight must fall below what the current one leaves of the limit.
        return max(0.0, left - (limit - current_count) * expiry / previous_count)
    # No room in this window: in the next, its count weighs current_count * (1 - elapsed / expiry).
    return left + max(0.0, expiry * (1 - limit / current_count))


class RateLimiter:
    """A sliding window per (scope, client): no burst of twice the limit at a window edge.

    The sliding-window counter weighs the previous window's count by how much of it still
    overlaps; it keeps two counters per client instead of one timestamp per request, which makes
    it several times cheaper than an exact moving window at the same protection.
    """

    def __init__(
        self, settings: Settings, scope: str = "waitlist", *, clock: Callable[[], float] = time.time
    ) -> None:
        """``clock`` (seconds since the epoch) times the windows of the in-process store; Redis
        keeps its own time."""
        self.items: list[RateLimitItem] = parse_many(settings.waitlist_rate_limit)
        global_limit = settings.waitlist_global_rate_limit
        self.global_items: list[RateLimitItem] = parse_many(global_limit) if global_limit else []
        self.scope = scope
        self.global_scope = f"{scope}-all"
        # The default: one limit per client, none global, nothing else's allowance to spare.
        self._only: RateLimitItem | None = (
            self.items[0] if len(self.items) == 1 and not self.global_items else None
        )
        self.ipv6_prefix = settings.rate_limit_ipv6_prefix
        uri = _async_storage_uri(settings.rate_limit_storage)
        options: dict[str, Any] = {}
        if uri.startswith("async+memory://"):
            uri = WINDOW_COUNTERS_URI
            options["max_counters"] = 2 * settings.rate_limit_memory_clients * len(self.items)
            options["clock"] = clock
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
        """Count one request from ``address`` against its client's limits and the global one, all
        or none; when a limit refuses it (then none counts it), the seconds to wait until every
        limit has room again for it (``_wait``), else None."""
        client = client_key(address, self.ipv6_prefix)
        counters, only = self._counters, self._only
        if counters is not None and only is not None:
            # In process, one limit and none global (the default): no coroutine between the route
            # and the counter, as every registration pays for it.
            if counters.acquire(only.key_for(self.scope, client), only.amount, only.get_expiry()):
                return None
            return await self._wait([(only, self.scope, client)], 0)
        limits = [(item, self.scope, client) for item in self.items]
        limits += [(item, self.global_scope, GLOBAL_CLIENT) for item in self.global_items]
        if counters is not None:
            refused = counters.acquire_all(self._hits(limits))
        elif self._batched is not None:
            refused = await self._batched.acquire(self._hits(limits))
        else:
            refused = await self._test_then_hit(limits)
        if refused is None:
            return None
        return await self._wait(limits, refused)

    @staticmethod
    def _hits(limits: list[tuple[RateLimitItem, str, str]]) -> list[tuple[str, int, int]]:
        return [(item.key_for(scope, who), item.amount, item.get_expiry()) for item, scope, who in limits]

    async def _test_then_hit(self, limits: list[tuple[RateLimitItem, str, str]]) -> int | None:
        """limits' own calls, a round trip each (Redis Sentinel or Cluster): every limit tested, then
        each hit. Not atomic: a request racing another between the two may still be counted by a
        limit while another refuses it (the hits' own test), which the tests first make rare."""
        try:
            if len(limits) > 1:
                for at, (item, scope, who) in enumerate(limits):
                    if not await self.strategy.test(item, scope, who):
                        return at
            for at, (item, scope, who) in enumerate(limits):
                if not await self.strategy.hit(item, scope, who):
                    return at
        except Exception:
            log.warning("rate-limit hit failed", exc_info=True)
            raise
        return None

    async def _wait(self, limits: list[tuple[RateLimitItem, str, str]], refused: int) -> int:
        """Whole seconds after which the limit ``refused``, and every other of ``limits`` full now,
        has room again: the first whole second past the last of them (``until_room``). Told only
        the refusing limit's (``2/minute;2/hour``: 40 s), a client waiting as told would be refused
        again by the next (then told 56 minutes); told limits' ``reset_time``, when the counts next
        fall, not when they fall enough, it could be refused again, told a second more. Read on a
        refusal only."""
        windows = cast(SlidingWindowCounterSupport, self.storage)  # as the strategy requires
        waits = []
        for at, (item, scope, who) in enumerate(limits):
            window = await windows.get_sliding_window(item.key_for(scope, who), item.get_expiry())
            wait = until_room(item.amount, item.get_expiry(), *window)
            if at == refused or wait > 0:
                waits.append(wait)
        return math.floor(max(waits)) + 1

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
