"""The retry policy, as data: a tuple of delays and one pure function over it.

``RetryPolicy.next_delay(attempt, verdict, rng, retry_after=...)`` answers how long to wait before
the next attempt after attempt number ``attempt`` (1 for the first try) failed, or ``None`` when the
schedule is spent and the delivery is ``failed``. Nothing here reads a clock or the network, so the
whole policy is tested with a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

from service.settings import DEFAULT_RETRY_SCHEDULE

JITTER = 0.2  # ±20% jitter, so a partner's recovery is not met by a synchronised wave
# A partner's Retry-After may stretch a delay, but not park a delivery for longer than an hour
# beyond what the schedule itself would wait.
MAX_RETRY_AFTER = 3600.0


class Verdict(StrEnum):
    """What one attempt's answer means for its delivery."""

    DELIVERED = "delivered"  # 2xx
    GONE = "gone"  # 410: the partner asked us to stop; the partner is paused
    RETRY = "retry"  # anything else: another status, a timeout, a refused connection


def verdict_for(status_code: int | None) -> Verdict:
    if status_code is not None and 200 <= status_code < 300:
        return Verdict.DELIVERED
    if status_code == 410:
        return Verdict.GONE
    return Verdict.RETRY


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None if unusable;
    never raises, whatever the partner sent. Seconds past what a float holds are infinite: as long
    as the policy's ceiling allows."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)  # no int(): it refuses more than 4,300 digits, and a float overflows
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # the last: a zone past any date
        return None
    if when.tzinfo is None:
        return None  # RFC 9110 dates are GMT; one without a zone is not a date we should guess at
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    schedule: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    jitter: float = JITTER
    max_retry_after: float = MAX_RETRY_AFTER

    @classmethod
    def from_schedule(cls, schedule: tuple[float, ...]) -> RetryPolicy:
        """The policy for ``Settings.webhook_retry_schedule`` (jitter and bounds are fixed)."""
        return cls(tuple(schedule))

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    def next_delay(
        self, attempt: int, verdict: Verdict, rng: random.Random, *, retry_after: float | None = None
    ) -> float | None:
        """Seconds until the attempt after ``attempt``, or None when the schedule is spent;
        ``retry_after``: the seconds the partner asked us to wait, when it said.

        A delivered or gone verdict schedules nothing (None): the caller settles those itself.
        """
        if verdict is not Verdict.RETRY or attempt < 1 or attempt > len(self.schedule):
            return None
        scheduled = self.schedule[attempt - 1]
        delay = scheduled * rng.uniform(1 - self.jitter, 1 + self.jitter)
        if retry_after is not None:
            # Longer when the partner asks, up to the ceiling; never shorter than the jittered delay
            # it would have had without asking (a later step's jitter may pass the ceiling).
            ceiling = max(scheduled, self.max_retry_after)
            delay = max(delay, min(retry_after, ceiling))
        return delay
