"""A request counts against all of its limits or none, in process memory and on Redis.

A request refused by one limit (the global one, or one of its client's) spends nothing of the
others': a client refused only while the global limit was spent gets in once it has room again.
On Redis that costs no round trip more: one script call per batch of requests, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from limits import parse

from service.ratelimit import GLOBAL_CLIENT, RateLimiter
from service.settings import Settings

ME, SOMEONE, THIRD = "203.0.113.7", "198.51.100.1", "192.0.2.33"


STANDING = 1_780_000_020.0  # seconds since the epoch: twenty seconds into a minute


async def _limiter(
    rate_limit_storage: dict[str, str], *, own_calls: bool = False, **limits: str
) -> RateLimiter:
    """A started limiter; with ``own_calls``, one that counts through limits' own calls (test, then
    hit), as on Redis Sentinel or Cluster, rather than in process or in batches."""
    # In process, the windows stand still (a minute's edge never falls inside a sequence); Redis
    # keeps its own time, and a window there begins with its first hit.
    limiter = RateLimiter(Settings(**rate_limit_storage, **limits), clock=lambda: STANDING)
    if own_calls:
        limiter._counters = limiter._batched = None
    limiter.start()
    return limiter


OWN_CALLS = pytest.mark.parametrize(
    "own_calls", [False, True], ids=["batched-or-in-process", "limits-own-calls"]
)


async def _remaining(limiter: RateLimiter, limit: str, client: str) -> int:
    item = parse(limit)
    scope = limiter.global_scope if client == GLOBAL_CLIENT else limiter.scope
    return int((await limiter.strategy.get_window_stats(item, scope, client)).remaining)


async def _global_has_room_again(limiter: RateLimiter, limit: str) -> None:
    """The global window passes (its counters cleared, as time would clear them)."""
    await limiter.strategy.clear(parse(limit), limiter.global_scope, GLOBAL_CLIENT)


@OWN_CALLS
def test_a_request_refused_by_the_global_limit_spends_none_of_its_clients_allowance(
    rate_limit_storage: dict[str, str], own_calls: bool
) -> None:
    """Someone spends the global allowance; my three requests are refused by it alone. My own
    3/minute is untouched, so once the global limit has room I get in."""

    async def play() -> tuple[Any, ...]:
        limiter = await _limiter(
            rate_limit_storage,
            own_calls=own_calls,
            waitlist_rate_limit="3/minute",
            waitlist_global_rate_limit="1/minute",
        )
        try:
            other = await limiter.hit(SOMEONE)
            mine = [await limiter.hit(ME) for _ in range(3)]
            left = await _remaining(limiter, "3/minute", ME)
            await _global_has_room_again(limiter, "1/minute")
            later = await limiter.hit(ME)
            return other, mine, left, later, await _remaining(limiter, "3/minute", ME)
        finally:
            await limiter.close()

    other, mine, left, later, left_after = asyncio.run(play())
    assert other is None
    assert all(isinstance(wait, int) and 1 <= wait <= 61 for wait in mine), mine
    assert left == 3
    assert (later, left_after) == (None, 2)


def test_a_request_refused_by_its_clients_limit_spends_none_of_the_global_allowance(
    rate_limit_storage: dict[str, str],
) -> None:
    """Over my own 1/minute, my second request leaves the global 2/minute to the others."""

    async def play() -> list[int | None]:
        limiter = await _limiter(
            rate_limit_storage, waitlist_rate_limit="1/minute", waitlist_global_rate_limit="2/minute"
        )
        try:
            return [await limiter.hit(client) for client in (ME, ME, SOMEONE, THIRD)]
        finally:
            await limiter.close()

    first, again, other, third = asyncio.run(play())
    assert (first, other) == (None, None)
    assert isinstance(again, int) and isinstance(third, int)  # mine: my limit; the third: the global one


@OWN_CALLS
def test_a_request_refused_by_one_of_its_clients_limits_spends_none_of_the_others(
    rate_limit_storage: dict[str, str], own_calls: bool
) -> None:
    """`5/hour;1/minute`: the second request in a minute is refused by the minute's limit and
    leaves four of the hour's five (it used to spend one: the hour is counted first)."""

    async def play() -> tuple[list[int | None], int, int]:
        limiter = await _limiter(
            rate_limit_storage, own_calls=own_calls, waitlist_rate_limit="5/hour;1/minute"
        )
        try:
            answers = [await limiter.hit(ME) for _ in range(3)]
            return answers, await _remaining(limiter, "5/hour", ME), await _remaining(limiter, "1/minute", ME)
        finally:
            await limiter.close()

    answers, hour, minute = asyncio.run(play())
    assert answers[0] is None and all(isinstance(wait, int) for wait in answers[1:])
    assert (hour, minute) == (4, 0)


def test_requests_at_once_are_counted_all_or_none_in_one_call_per_batch(
    rate_limit_storage: dict[str, str],
) -> None:
    """Six clients at once under a global 2/minute: exactly two get in, and the four refused keep
    their own allowance whole. On Redis each request is one item of a batched script call, the
    client's and the global hit together: no more calls than requests, and fewer."""

    async def play() -> tuple[list[int | None], list[int], list[int]]:
        limiter = await _limiter(
            rate_limit_storage, waitlist_rate_limit="5/minute", waitlist_global_rate_limit="2/minute"
        )
        sizes: list[int] = []
        if limiter._batched is not None:
            send = limiter._batched._send

            async def counted(requests: list[Any]) -> Any:
                sizes.append(len(requests))
                return await send(requests)

            limiter._batched._batch._flush = counted
        clients = [f"192.0.2.{n}" for n in range(1, 7)]
        try:
            answers = list(await asyncio.gather(*(limiter.hit(client) for client in clients)))
            left = [await _remaining(limiter, "5/minute", client) for client in clients]
        finally:
            await limiter.close()
        return answers, left, sizes

    answers, left, sizes = asyncio.run(play())
    assert sum(answer is None for answer in answers) == 2
    assert sorted(left) == [4, 4, 5, 5, 5, 5]
    if rate_limit_storage["rate_limit_storage"] != "memory://":
        assert sum(sizes) == 6 and len(sizes) < 6


def test_on_redis_a_request_under_two_limits_is_one_script_call(rate_limit_storage: dict[str, str]) -> None:
    """The client's limit and the global one go in one call, as one limit did: one round trip a
    request (they were two, one after the other)."""

    async def play() -> tuple[list[int | None], list[int]]:
        limiter = await _limiter(
            rate_limit_storage, waitlist_rate_limit="5/minute", waitlist_global_rate_limit="10/minute"
        )
        calls: list[int] = []
        if limiter._batched is not None:
            send = limiter._batched._send

            async def counted(requests: list[Any]) -> Any:
                calls.append(sum(len(hits) for hits in requests))
                return await send(requests)

            limiter._batched._batch._flush = counted
        try:
            return [await limiter.hit(ME) for _ in range(3)], calls
        finally:
            await limiter.close()

    answers, calls = asyncio.run(play())
    assert answers == [None] * 3
    if rate_limit_storage["rate_limit_storage"] != "memory://":
        assert calls == [2, 2, 2]  # each call: the client's hit and the global one
