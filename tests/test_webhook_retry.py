"""The retry policy: a schedule with ±20% jitter, bounded Retry-After, and an end."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from service.settings import DEFAULT_RETRY_SCHEDULE
from service.webhooks.retry import (
    MAX_RETRY_AFTER,
    RetryPolicy,
    Verdict,
    parse_retry_after,
    verdict_for,
)

RETRY = Verdict.RETRY
NOW = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("attempt", range(1, len(DEFAULT_RETRY_SCHEDULE) + 1))
def test_each_delay_is_the_schedule_within_twenty_percent(attempt: int) -> None:
    """Attempt n waits schedule[n-1] seconds, give or take 20%, and jitter really varies."""
    policy = RetryPolicy()
    rng = random.Random(attempt)
    scheduled = DEFAULT_RETRY_SCHEDULE[attempt - 1]
    delays = [policy.next_delay(attempt, RETRY, rng) for _ in range(200)]
    assert all(d is not None and 0.8 * scheduled <= d <= 1.2 * scheduled for d in delays)
    assert len(set(delays)) > 100


def test_schedule_spent_means_failed() -> None:
    """After the last scheduled retry there is no next delay: the delivery is failed."""
    policy = RetryPolicy(schedule=(1, 2))
    rng = random.Random(0)
    assert policy.max_attempts == 3
    assert policy.next_delay(2, RETRY, rng) is not None
    assert policy.next_delay(3, RETRY, rng) is None
    assert policy.next_delay(RetryPolicy().max_attempts, RETRY, rng) is None


@pytest.mark.parametrize("verdict", [Verdict.DELIVERED, Verdict.GONE])
def test_only_retryable_outcomes_schedule_a_retry(verdict: Verdict) -> None:
    """A delivered or gone attempt schedules nothing."""
    assert RetryPolicy().next_delay(1, verdict, random.Random(0)) is None


@pytest.mark.parametrize(
    ("schedule", "retry_after", "low", "high"),
    [
        ((10,), 120, 120, 120),  # longer than the schedule: honoured
        ((10,), 2, 8, 12),  # shorter than the schedule: the schedule wins
        ((10,), 86_400, MAX_RETRY_AFTER, MAX_RETRY_AFTER),  # a day: capped at an hour
        ((7200,), 86_400, 7200, 7200),  # the cap never shortens the schedule itself
    ],
)
def test_retry_after_is_honoured_within_bounds(
    schedule: tuple[float, ...], retry_after: float, low: float, high: float
) -> None:
    """Retry-After stretches a delay up to an hour (or the scheduled delay if longer)."""
    policy = RetryPolicy(schedule=schedule)
    delay = policy.next_delay(1, Verdict.RETRY, random.Random(3), retry_after=retry_after)
    assert delay is not None and low <= delay <= high


@pytest.mark.parametrize("retry_after", [0.0, 1.0, 60.0, 5_000.0, 86_400.0])
def test_retry_after_never_shortens_the_wait(retry_after: float) -> None:
    """Whatever the partner asks, the wait is at least what it would have been without asking, at
    every step of the default schedule and for 500 draws of the jitter: a step over the hour's
    ceiling, jittered above it, was cut back to the ceiling."""
    policy = RetryPolicy()
    for attempt in range(1, policy.max_attempts):
        for seed in range(500):
            alone = policy.next_delay(attempt, Verdict.RETRY, random.Random(seed))
            asked = policy.next_delay(attempt, Verdict.RETRY, random.Random(seed), retry_after=retry_after)
            assert alone is not None and asked is not None and asked >= alone, (attempt, seed)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("Mon, 29 Jun 2026 12:05:00 GMT", 300.0),
        ("Mon, 29 Jun 2026 11:00:00 GMT", 0.0),  # in the past: retry as scheduled
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        (None, None),
        ("9" * 400, float("inf")),  # past a float: as long as the ceiling allows
        ("9" * 5000, float("inf")),  # past int()'s digit limit
        ("Mon, 29 Jun 2026 12:00:00 +99999999999999999999", None),  # a zone past any date
        ("Mon, 29 Jun 99999 12:00:00 GMT", None),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    """Retry-After is delta-seconds or an HTTP date; anything else is ignored, and no value, however
    long or odd, raises."""
    assert parse_retry_after(header, NOW) == seconds


def test_a_retry_after_past_any_float_waits_the_ceiling() -> None:
    """Seconds past what a float holds are read as "as long as you may": the hour's ceiling."""
    policy = RetryPolicy(schedule=(10.0,))
    retry_after = parse_retry_after("9" * 400, NOW)
    assert policy.next_delay(1, Verdict.RETRY, random.Random(1), retry_after=retry_after) == MAX_RETRY_AFTER


@pytest.mark.parametrize(
    ("status", "verdict"),
    [(200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (299, Verdict.DELIVERED),
     (410, Verdict.GONE), (301, Verdict.RETRY), (404, Verdict.RETRY), (429, Verdict.RETRY),
     (500, Verdict.RETRY), (None, Verdict.RETRY)],
)  # fmt: skip
def test_verdicts(status: int | None, verdict: Verdict) -> None:
    """2xx delivers, 410 pauses, everything else (no answer included) retries."""
    assert verdict_for(status) is verdict
