"""429 on POST /api/waitlist, on process memory and on the machine's Redis."""

from __future__ import annotations

import asyncio
import uuid
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from limits import parse
from limits.aio import strategies as limits_strategies
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from service import ratelimit
from service.clock import ManualClock
from service.ratelimit import (
    LIMITS_VERSION,
    WINDOW_COUNTERS_URI,
    BatchedHits,
    LimitsInternalsMoved,
    RateLimiter,
    WindowCounters,
    client_key,
)
from service.settings import Settings
from tests.conftest import REDIS_URL, RUN_ID, Client
from tests.pins import exact_pin
from tests.scratch import redis_keys

BODY = {"email": "rate@example.com", "intent": "claim"}
LIMITED = {"ok": False, "message": "Too many requests; try again later."}


def post(client, headers=None, body=BODY):
    return client.post("/api/waitlist", json=body, headers=headers or {})


def test_requests_over_the_limit_are_429_with_retry_after(make_client, rate_limit_storage):
    """The fourth request in a minute under `3/minute` is 429 with Retry-After in seconds."""
    with make_client(waitlist_rate_limit="3/minute", **rate_limit_storage) as client:
        statuses = [post(client).status_code for _ in range(3)]
        limited = post(client)
    assert statuses == [200, 200, 200]
    assert (limited.status_code, limited.json) == (429, LIMITED)
    # Up to the first whole second past the minute's end (the clock may stand at its start).
    assert 1 <= int(limited.headers["retry-after"]) <= 61


def test_invalid_requests_count_against_the_limit(make_client, rate_limit_storage):
    """Bad bodies spend the allowance too, so guessing at the schema cannot dodge the limit."""
    with make_client(waitlist_rate_limit="2/minute", **rate_limit_storage) as client:
        first = post(client, body={"email": "x"}).status_code
        second = post(client, body={"email": "x"}).status_code
        third = post(client).status_code
    assert (first, second, third) == (400, 400, 429)


def test_spoofed_forwarded_for_changes_nothing(make_client, rate_limit_storage):
    """Without proxy settings, X-Forwarded-For is ignored: rotating it does not reset the limit."""
    with make_client(waitlist_rate_limit="2/minute", **rate_limit_storage) as client:
        statuses = [
            post(client, headers={"x-forwarded-for": f"203.0.113.{n}", "x-real-ip": f"198.51.100.{n}"}).status_code
            for n in range(4)
        ]
    assert statuses == [200, 200, 429, 429]


def test_trusted_proxy_header_separates_clients(monkeypatch, sqlite_url, rate_limit_storage):
    """With SANIC_PROXIES_COUNT=1 the forwarded address is the client, each with its own allowance."""
    from service.app import create_app
    from service.settings import Settings

    monkeypatch.setenv("SANIC_PROXIES_COUNT", "1")
    settings = Settings(
        database_url=sqlite_url, waitlist_rate_limit="1/minute", trusted_proxies=("127.0.0.1",), **rate_limit_storage
    )
    with Client(create_app(settings, clock=ManualClock())) as client:
        statuses = [
            post(client, headers={"x-forwarded-for": address}).status_code
            for address in ("203.0.113.1", "203.0.113.2", "203.0.113.1")
        ]
    assert statuses == [200, 200, 429]


@pytest.mark.parametrize(
    ("variable", "value", "trusted"),
    [
        (None, None, False),
        ("SANIC_PROXIES_COUNT", "1", True),
        ("SANIC_REAL_IP_HEADER", "x-real-ip", True),
        ("SANIC_FORWARDED_SECRET", "s3cret", True),
    ],
)
def test_proxy_headers_are_read_only_under_one_of_sanics_proxy_settings(monkeypatch, variable, value, trusted):
    """Any of Sanic's three proxy settings turns header parsing on; none of them leaves the peer address."""
    from sanic.config import Config

    from service.waitlist import trusts_proxies

    for name in ("SANIC_PROXIES_COUNT", "SANIC_REAL_IP_HEADER", "SANIC_FORWARDED_SECRET"):
        monkeypatch.delenv(name, raising=False)
    if variable:
        monkeypatch.setenv(variable, value)
    assert trusts_proxies(Config()) is trusted


def test_limit_is_shared_by_two_servers_on_redis(sqlite_url, rate_limit_storage):
    """Two server processes' apps on one Redis enforce one limit per client between them."""
    if rate_limit_storage["rate_limit_storage"].startswith("memory"):
        pytest.skip("process memory is not shared between servers by design")
    from service.app import create_app
    from service.settings import Settings

    settings = Settings(database_url=sqlite_url, waitlist_rate_limit="3/minute", **rate_limit_storage)
    with Client(create_app(settings)) as one:
        first = [post(one).status_code for _ in range(2)]
    with Client(create_app(settings)) as two:
        second = [post(two).status_code for _ in range(2)]
    assert (first, second) == ([200, 200], [200, 429])


@pytest.mark.parametrize(
    ("notation", "allowed"),
    [("1/minute", 1), ("2/hour;5/day", 2), ("4/minute;2/hour", 2)],
)
def test_limits_notation_with_several_windows(make_client, notation, allowed):
    """Every window in `SERVICE_WAITLIST_RATE_LIMIT` applies; the tightest one decides."""
    with make_client(waitlist_rate_limit=notation) as client:
        statuses = [post(client).status_code for _ in range(allowed + 1)]
    assert statuses == [200] * allowed + [429]


# --- memory://: limits' sliding-window counter on WindowCounters --------------------------------


class Seconds:
    """A float clock moved by hand, for the storage's ``clock`` and limits' ``time.time``."""

    def __init__(self, start: float = 1_780_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


WINDOWS = ["3/second", "5/minute", "2/hour"]
steps = st.lists(
    st.tuples(
        st.integers(0, 3),  # client
        st.sampled_from(range(len(WINDOWS))),  # which limit
        st.floats(0, 200, allow_nan=False),  # seconds since the previous step
        st.sampled_from(["hit", "stats", "clear"]),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_window_counters_decide_as_limits_own_memory_storage(script):
    """Same hits allowed, same window stats, through any sequence of hits, waits and clears."""
    from limits.aio.storage import memory as limits_memory

    clock = Seconds()
    items = [parse(notation) for notation in WINDOWS]

    async def play() -> list[tuple[object, ...]]:
        ours = SlidingWindowCounterRateLimiter(WindowCounters(clock=clock))
        theirs = SlidingWindowCounterRateLimiter(limits_memory.MemoryStorage())
        seen = []
        for client, which, wait, action in script:
            clock.now += wait
            item = items[which]
            for strategy in (ours, theirs):
                if action == "hit":
                    seen.append((strategy is ours, await strategy.hit(item, "w", str(client))))
                elif action == "stats":
                    stats = await strategy.storage.get_sliding_window(item.key_for("w", str(client)), item.get_expiry())
                    seen.append((strategy is ours, stats))
                else:
                    await strategy.clear(item, "w", str(client))
        return seen

    with mock.patch.object(limits_memory, "time", clock):
        seen = asyncio.run(play())
    assert [outcome for mine, outcome in seen if mine] == [outcome for mine, outcome in seen if not mine]


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 6),
    hits=st.lists(st.floats(0, 130, allow_nan=False), max_size=14),  # seconds after the start
    then=st.floats(0, 130, allow_nan=False),
)
def test_until_room_is_when_the_next_hit_first_fits(limit, hits, then):
    """``until_room`` over a counter's window: a hit that waits that long (and a hair) fits, one
    that waits a second less does not, whatever the counts in the two windows (``limit``/minute)."""
    from service.ratelimit import until_room

    def history() -> tuple[WindowCounters, Seconds]:
        clock = Seconds()
        counters = WindowCounters(clock=clock)
        for at in sorted(hits):
            clock.now = Seconds().now + at
            counters.acquire("k", limit, 60)
        clock.now = Seconds().now + max([then, *hits])
        return counters, clock

    counters, _ = history()
    wait = until_room(limit, 60, *asyncio.run(counters.get_sliding_window("k", 60)))
    assert wait >= 0
    later, moved = history()
    moved.now += wait + 1e-6
    assert later.acquire("k", limit, 60)
    if wait >= 1:
        sooner, moved = history()
        moved.now += wait - 1
        assert not sooner.acquire("k", limit, 60)


def test_window_counters_forget_clients_once_their_windows_pass():
    """Counters of 10,000 clients are dropped by the first write after their two windows have passed."""
    clock = Seconds()
    storage = WindowCounters(clock=clock)
    strategy = SlidingWindowCounterRateLimiter(storage)
    item = parse("5/minute")

    async def play() -> tuple[int, int, int]:
        for client in range(10_000):
            assert await strategy.hit(item, "w", f"198.51.{client // 256}.{client % 256}")
        held = len(storage)
        clock.now += 119  # inside two windows: every counter may still count
        await strategy.hit(item, "w", "203.0.113.1")
        still = len(storage)
        clock.now += 2  # past two windows of the first 10,000
        await strategy.hit(item, "w", "203.0.113.2")
        return held, still, len(storage)

    assert asyncio.run(play()) == (10_000, 10_001, 2)


def test_window_counters_cleared_counter_created_again_keeps_its_new_expiry():
    """A counter cleared and started again lives its own time, not the cleared one's."""
    clock = Seconds()
    storage = WindowCounters(clock=clock)

    async def play() -> tuple[int, int, int]:
        await storage.incr("k", 10)
        clock.now += 5
        await storage.clear("k")
        await storage.incr("k", 10, amount=3)  # expires at +15
        clock.now += 6  # the first counter's time (+10) has passed
        await storage.incr("other", 10)  # a write: drops what has expired
        during = await storage.get("k")
        clock.now += 5  # +16: past the second counter's time too
        await storage.incr("other", 10)
        return during, await storage.get("k"), len(storage)

    assert asyncio.run(play()) == (3, 0, 1)


def test_memory_uri_builds_window_counters_and_redis_keeps_limits_storage(rate_limit_storage):
    """memory:// is served by WindowCounters, redis:// by limits' own RedisStorage."""
    from limits.aio.storage import RedisStorage

    limiter = RateLimiter(Settings(**rate_limit_storage))
    expected = WindowCounters if rate_limit_storage["rate_limit_storage"] == "memory://" else RedisStorage
    assert type(limiter.storage) is expected


# --- redis://: hits batched, counted exactly as limits counts them -----------------------------


@pytest.fixture
def redis_settings():
    """The machine's Redis under a key prefix of the test's own, removed afterwards."""
    if not REDIS_URL:
        pytest.skip("SERVICE_TEST_REDIS_URL is not set: no Redis to test against")
    prefix = f"service-test-{RUN_ID}-{uuid.uuid4().hex[:8]}"
    yield {"rate_limit_storage": REDIS_URL, "rate_limit_key_prefix": prefix}
    asyncio.run(redis_keys(REDIS_URL, prefix, delete=True))


async def _limiter(settings: Settings) -> RateLimiter:
    limiter = RateLimiter(settings)
    limiter.start()
    return limiter


def test_concurrent_redis_hits_share_one_script_call_and_the_limit(redis_settings):
    """Ten hits at once under 4/minute: sent together, exactly four allowed, the rest told to wait."""
    settings = Settings(waitlist_rate_limit="4/minute", **redis_settings)

    async def play() -> tuple[list[int | None], list[int]]:
        limiter = await _limiter(settings)
        assert limiter._batched is not None
        sizes: list[int] = []
        send = limiter._batched._send

        async def counted(hits):
            sizes.append(len(hits))
            return await send(hits)

        limiter._batched._batch._flush = counted
        try:
            answers = await asyncio.gather(*(limiter.hit("192.0.2.7") for _ in range(10)))
        finally:
            await limiter.close()
        return list(answers), sizes

    answers, sizes = asyncio.run(play())
    assert answers[:4] == [None] * 4
    assert all(isinstance(wait, int) and 1 <= wait <= 61 for wait in answers[4:])
    assert sum(sizes) == 10 and len(sizes) < 10  # at most: one alone, then the rest together


def test_batched_hits_and_limits_own_hits_count_the_same_counters(redis_settings):
    """Same script, keys and arguments as limits: a process on limits alone shares the count."""
    settings = Settings(waitlist_rate_limit="3/minute", **redis_settings)
    item = parse("3/minute")

    async def play() -> list[bool]:
        ours = await _limiter(settings)
        theirs = RateLimiter(settings).strategy  # limits' SlidingWindowCounterRateLimiter, one call a hit
        try:
            seen = [await ours.hit("192.0.2.8") is None, await theirs.hit(item, "waitlist", "192.0.2.8")]
            seen += [await ours.hit("192.0.2.8") is None, await theirs.hit(item, "waitlist", "192.0.2.8")]
            seen.append(await ours.hit("192.0.2.8") is None)
        finally:
            await ours.close()
        return seen

    assert asyncio.run(play()) == [True, True, True, False, False]


def test_batched_hits_survive_redis_forgetting_the_script(redis_settings):
    """After SCRIPT FLUSH (a Redis restart, say), the script is loaded again and the hit counted."""
    import redis.asyncio

    settings = Settings(waitlist_rate_limit="2/minute", **redis_settings)

    async def play() -> list[int | None]:
        limiter = await _limiter(settings)
        client = redis.asyncio.Redis.from_url(settings.rate_limit_storage)
        try:
            first = await limiter.hit("192.0.2.9")
            await client.script_flush()
            return [first, await limiter.hit("192.0.2.9"), await limiter.hit("192.0.2.9")]
        finally:
            await client.aclose()
            await limiter.close()

    first, second, third = asyncio.run(play())
    assert (first, second) == (None, None)
    assert isinstance(third, int)


def test_redis_hits_are_batched_and_memory_hits_are_counted_in_process(rate_limit_storage):
    """On Redis hits go through BatchedHits; in memory, straight to WindowCounters."""
    limiter = RateLimiter(Settings(**rate_limit_storage))
    on_redis = not rate_limit_storage["rate_limit_storage"].startswith("memory")
    assert (limiter._batched is not None, limiter._counters is not None) == (on_redis, not on_redis)


def test_window_counters_is_a_storage_registered_with_limits():
    """limits' own storage factory builds WindowCounters from its scheme, as for any custom storage."""
    from limits.storage import storage_from_string

    assert type(storage_from_string(WINDOW_COUNTERS_URI)) is WindowCounters


# --- limits' internals under BatchedHits: the pinned version's, or a loud failure --------------------


def _limits_redis_storage():
    """limits' redis-py storage, as RateLimiter builds it; nothing connects until a command is sent."""
    from limits.storage import storage_from_string

    return storage_from_string("async+redis://127.0.0.1:1", implementation="redispy", key_prefix="unused")


def test_limits_is_the_pinned_version_whose_internals_batched_hits_reads():
    """pyproject.toml pins limits exactly, to the version installed and proven (LIMITS_VERSION)."""
    import limits

    pinned = exact_pin("limits")
    assert pinned, "pyproject.toml must pin limits exactly (==): service.ratelimit.BatchedHits reads its internals"
    assert limits.__version__ == pinned == LIMITS_VERSION, (
        f"service.ratelimit.BatchedHits reads limits {LIMITS_VERSION}'s internals (RedisStorage.bridge, "
        "_current_window_key, _previous_window_key, the bridge's prefixed_key, get_connection and "
        f"acquire_sliding_window.lua); pyproject.toml pins {pinned} and {limits.__version__} is installed. "
        "Run tests/test_ratelimit.py and python -m benchmarks.ratelimit --redis URL on it, then move both."
    )
    assert isinstance(BatchedHits(_limits_redis_storage()), BatchedHits)


@pytest.mark.parametrize(
    ("move", "named"),
    [
        (lambda storage: setattr(storage, "bridge", None), "RedisStorage.bridge"),
        (lambda storage: setattr(storage, "_current_window_key", None), "RedisStorage._current_window_key"),
        (lambda storage: setattr(storage.bridge, "prefixed_key", None), "RedispyBridge.prefixed_key"),
        (lambda storage: setattr(storage.bridge, "lua_acquire_sliding_window", object()), "lua_acquire_sliding_window.script"),
        (lambda storage: setattr(storage.bridge.lua_acquire_sliding_window, "script", "return true"), "acquire_sliding_window.lua (its text changed)"),
    ],
)
def test_batched_hits_refuses_to_start_when_an_internal_moved(move, named):
    """An internal gone or changed stops BatchedHits with its name and the proven version, never a fallback."""
    storage = _limits_redis_storage()
    move(storage)
    with pytest.raises(LimitsInternalsMoved) as moved:
        BatchedHits(storage)
    assert named in str(moved.value)
    assert f"limits {LIMITS_VERSION}'s internal" in str(moved.value)


def test_a_limiter_on_redis_without_limits_internals_does_not_start(monkeypatch):
    """RateLimiter on redis:// fails to build when BatchedHits cannot: no silent call-per-hit fallback."""
    import limits.aio.storage.redis.redispy as redispy

    monkeypatch.setattr(redispy.RedispyBridge, "prefixed_key", None)
    with pytest.raises(LimitsInternalsMoved, match=r"RedispyBridge\.prefixed_key"):
        RateLimiter(Settings(rate_limit_storage="redis://127.0.0.1:1"))


# --- who a client is, a bounded store, a global limit -------------------------------------------


@pytest.mark.parametrize(
    ("address", "prefix", "client"),
    [
        ("203.0.113.7", 64, "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", 64, "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::1", 48, "2001:db8:1::/48"),
        ("2001:db8:1:2::1", 128, "2001:db8:1:2::1/128"),
        ("[2001:db8:1:2::1]", 64, "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", 64, "203.0.113.7"),
        ("fe80::1%eth0", 64, "fe80::/64"),
        ("unknown", 64, "unknown"),
        # A port a proxy added (RFC 7239 allows one) is no part of the client.
        ("203.0.113.7:4000", 64, "203.0.113.7"),
        ("203.0.113.7:4001", 64, "203.0.113.7"),
        ("[2001:db8:1:2::1]:4000", 64, "2001:db8:1:2::/64"),
        ("[::ffff:203.0.113.7]:80", 64, "203.0.113.7"),
        ("unknown:4000", 64, "unknown:4000"),
        ("203.0.113.7:x", 64, "203.0.113.7:x"),
    ],
)
def test_a_client_is_an_ipv4_address_or_an_ipv6_network(address, prefix, client):
    """IPv4 by address, IPv6 by its network of the configured prefix, IPv4-mapped IPv6 as IPv4."""
    assert client_key(address, prefix) == client


def _proxied(monkeypatch, sqlite_url, **options):
    from service.app import create_app

    monkeypatch.setenv("SANIC_PROXIES_COUNT", "1")
    settings = Settings(database_url=sqlite_url, trusted_proxies=("127.0.0.1",), **options)
    return Client(create_app(settings, clock=ManualClock()))  # the limiter's windows stand still


def test_twenty_five_addresses_of_one_ipv6_64_are_one_client(monkeypatch, sqlite_url, rate_limit_storage):
    """Rotating through one /64 does not dodge `10/minute`; the next /64 and IPv4 clients are
    counted apart, and an IPv4-mapped address is its IPv4 client."""
    with _proxied(monkeypatch, sqlite_url, waitlist_rate_limit="10/minute", **rate_limit_storage) as client:
        rotating = [
            post(client, headers={"x-forwarded-for": f"2001:db8:7:7:{n:x}::{n + 1:x}"}).status_code
            for n in range(25)
        ]
        neighbour = post(client, headers={"x-forwarded-for": "2001:db8:7:8::1"}).status_code
        ipv4 = [post(client, headers={"x-forwarded-for": "203.0.113.9"}).status_code for _ in range(10)]
        mapped = post(client, headers={"x-forwarded-for": "::ffff:203.0.113.9"}).status_code
    assert rotating == [200] * 10 + [429] * 15
    assert (neighbour, ipv4, mapped) == (200, [200] * 10, 429)


def test_a_port_the_proxy_adds_does_not_make_a_new_client(monkeypatch, sqlite_url, rate_limit_storage):
    """A proxy that forwards the client's source port (``X-Forwarded-For: 203.0.113.7:4000``,
    RFC 7239 ``for="[2001:db8::1]:4000"``) names one client on every connection: the limit holds."""
    with _proxied(monkeypatch, sqlite_url, waitlist_rate_limit="3/minute", **rate_limit_storage) as client:
        ipv4 = [post(client, headers={"x-forwarded-for": f"203.0.113.7:{4000 + n}"}).status_code for n in range(5)]
        ipv6 = [
            post(client, headers={"x-forwarded-for": f"[2001:db8:9::{n + 1:x}]:{4000 + n}"}).status_code
            for n in range(5)
        ]
    assert ipv4 == [200] * 3 + [429] * 2
    assert ipv6 == [200] * 3 + [429] * 2


def test_a_longer_prefix_counts_smaller_ipv6_networks(monkeypatch, sqlite_url):
    """SERVICE_RATE_LIMIT_IPV6_PREFIX=128 counts each IPv6 address apart."""
    with _proxied(monkeypatch, sqlite_url, waitlist_rate_limit="1/minute", rate_limit_ipv6_prefix=128) as client:
        statuses = [post(client, headers={"x-forwarded-for": f"2001:db8::{n + 1}"}).status_code for n in range(3)]
    assert statuses == [200, 200, 200]


def test_the_memory_store_at_its_bound_counts_newcomers_together():
    """Full, the store makes no counter for a new client: newcomers share one overflow counter
    (held to one client's allowance in all), clients already counted keep their own counts, and
    memory stays bounded; once old counters expire, newcomers are counted apart again."""
    clock = Seconds()
    storage = WindowCounters(clock=clock, max_counters=100)
    strategy = SlidingWindowCounterRateLimiter(storage)
    item = parse("3/minute")

    async def play() -> tuple[list[bool], list[bool], list[bool], int, int, bool]:
        for n in range(100):
            for _ in range(3):
                assert await strategy.hit(item, "w", f"10.0.{n}.1")
        assert len(storage) == 100
        newcomers = [await strategy.hit(item, "w", f"2001:db8:{n:x}::/64") for n in range(1000)]
        known = [await strategy.hit(item, "w", f"10.0.{n}.1") for n in range(100)]  # still at their limit
        clock.now += 5
        fresh = [await strategy.hit(item, "w", "10.0.0.1")]  # the same window: still limited
        held = len(storage)
        clock.now += 116  # past two windows of every counter
        alone = await strategy.hit(item, "w", "192.0.2.1")
        return newcomers, known, fresh, held, storage.overflowed, alone

    newcomers, known, fresh, held, overflowed, alone = asyncio.run(play())
    assert newcomers == [True] * 3 + [False] * 997  # one allowance for the whole flood
    assert known == [False] * 100 and fresh == [False]  # no one's count was reset
    assert held <= 102 and overflowed == 1000  # the clients, and the flood's one counter (two windows)
    assert alone is True


def test_a_newcomer_refused_on_the_overflow_counter_waits_for_its_window():
    """Refused on the counter newcomers share while the store is full, a client is told to wait
    for that counter's window, not for its own, which holds nothing (it said 1 s)."""
    clock = Seconds()  # 1,600 s into an hour's window: 2,000 s left of it
    limiter = RateLimiter(Settings(waitlist_rate_limit="2/hour", rate_limit_memory_clients=1))
    limiter.storage._clock = clock  # the store's clock, and below limits' and the limiter's

    async def play() -> list[int | None]:
        # Room for two counters: the first two clients take one each (a client's first hit makes
        # one); the newcomers after them share one allowance of two.
        return [await limiter.hit(f"198.51.100.{n + 1}") for n in range(6)]

    with mock.patch.object(limits_strategies, "time", clock), mock.patch.object(ratelimit, "time", clock):
        waits = asyncio.run(play())
    assert waits == [None] * 4 + [2001, 2001]  # the first whole second past the window's end
    assert limiter.storage.overflowed == 4


@pytest.mark.parametrize(
    "limits",
    [{"waitlist_rate_limit": "2/minute;2/hour"}, {"waitlist_rate_limit": "2/minute", "waitlist_global_rate_limit": "2/hour"}],
    ids=["two windows", "client and global"],
)
def test_a_client_waiting_as_told_is_not_refused_again_by_another_full_limit(limits):
    """Refused while two limits are full, a client is told the longer wait, not the first limit's:
    waiting exactly that long, its next request passes."""
    clock = Seconds()
    limiter = RateLimiter(Settings(**limits), clock=clock)

    async def play() -> tuple[list[int | None], int | None]:
        waits = [await limiter.hit("198.51.100.7") for _ in range(3)]
        assert waits[2] is not None
        clock.now += waits[2]
        return waits, await limiter.hit("198.51.100.7")

    with mock.patch.object(limits_strategies, "time", clock), mock.patch.object(ratelimit, "time", clock):
        waits, after = asyncio.run(play())
    assert waits[:2] == [None, None]
    assert waits[2] is not None and 60 < waits[2] <= 3600  # the hour's, not the minute's
    assert after is None


def test_the_limiter_bounds_the_memory_store_by_the_setting():
    """SERVICE_RATE_LIMIT_MEMORY_CLIENTS sets the store's bound: two counters per client per limit."""
    limiter = RateLimiter(Settings(waitlist_rate_limit="10/minute;100/day", rate_limit_memory_clients=500))
    assert isinstance(limiter.storage, WindowCounters)
    assert limiter.storage.max_counters == 2 * 500 * 2


def test_a_full_store_answers_newcomers_429_in_the_error_shape(make_client):
    """Through the app: with room for one client (two counters) taken, the next address shares the
    overflow counter: its first request passes, its second is 429."""
    with make_client(waitlist_rate_limit="1/minute", rate_limit_memory_clients=1) as client:
        storage = client.app.ctx.limiter.storage
        for other in ("198.51.100.1", "198.51.100.2"):
            client.run(storage.acquire_sliding_window_entry(f"LIMITER/waitlist/{other}/1/1/minute", 1, 60))
        first = post(client)
        second = post(client)
    assert first.status_code == 200 and (second.status_code, second.json) == (429, LIMITED)
    assert storage.overflowed == 2


def test_the_global_limit_holds_every_client_together(monkeypatch, sqlite_url, rate_limit_storage):
    """SERVICE_WAITLIST_GLOBAL_RATE_LIMIT: once spent, any client is 429 in the same error shape."""
    options = {"waitlist_rate_limit": "5/minute", "waitlist_global_rate_limit": "3/minute", **rate_limit_storage}
    with _proxied(monkeypatch, sqlite_url, **options) as client:
        answers = [post(client, headers={"x-forwarded-for": f"203.0.113.{n + 1}"}) for n in range(4)]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    assert answers[-1].json == LIMITED
    assert 1 <= int(answers[-1].headers["retry-after"]) <= 61


def test_the_global_limit_is_unset_by_default():
    """Unset, the limiter counts per client only."""
    assert RateLimiter(Settings()).global_items == []
    with pytest.raises(ValueError, match="SERVICE_WAITLIST_GLOBAL_RATE_LIMIT"):
        Settings(waitlist_global_rate_limit="lots")


def test_a_storage_url_the_library_refuses_is_named_without_its_password(monkeypatch):
    """limits' own error quotes the URL, password and all; the service's names the setting only."""
    from limits.errors import ConfigurationError

    from service import ratelimit
    from service.settings import Settings

    url = "redis://:pw-never-shown@127.0.0.1:6379"

    def refuse(uri, **options):
        raise ConfigurationError(f"Unable to parse storage uri {uri}")

    monkeypatch.setattr(ratelimit, "storage_from_string", refuse)
    with pytest.raises(ValueError, match="SERVICE_RATE_LIMIT_STORAGE cannot be read") as raised:
        ratelimit.RateLimiter(Settings(rate_limit_storage=url))
    assert "pw-never-shown" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
