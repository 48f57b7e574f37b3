"""The words of the delivery state machine, each defined once.

Delivery states::

    pending ──claim──▶ delivering ──2xx──▶ delivered
       ▲                   │
       └──retry scheduled──┤──schedule spent──▶ failed ──admin retry/replay──▶ pending
                           └──410 (partner paused; due again on resume)──▶ pending

A ``pending`` delivery waits for its time, or for its partner to be resumed. Storage, indexes,
metrics and the admin API all use these members, never bare strings.
"""

from __future__ import annotations

from enum import StrEnum


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    FAILED = "failed"


# What a worker may claim: waiting rows, and claimed rows whose lease ran out (their worker died).
CLAIMABLE = (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)
# What nothing will change any more unless an operator acts: what retention prunes once old enough.
SETTLED = tuple(status for status in DeliveryStatus if status not in CLAIMABLE)


class AttemptOutcome(StrEnum):
    """What one logged attempt did to its delivery (the metrics counter uses the same words)."""

    DELIVERED = "delivered"
    RETRY = "retry"  # another attempt is scheduled
    FAILED = "failed"  # the schedule is spent
    PAUSED = "paused"  # the partner answered 410 and was paused


STATUS_AFTER = {
    AttemptOutcome.DELIVERED: DeliveryStatus.DELIVERED,
    AttemptOutcome.RETRY: DeliveryStatus.PENDING,
    AttemptOutcome.PAUSED: DeliveryStatus.PENDING,
    AttemptOutcome.FAILED: DeliveryStatus.FAILED,
}


class PartnerStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"  # by an admin, or by a 410 answer
    DISABLED = "disabled"  # by the service, after SERVICE_WEBHOOK_DISABLE_AFTER of unbroken failure


class Circuit(StrEnum):
    """A partner's circuit breaker, as the partner resource shows it."""

    CLOSED = "closed"  # deliveries go out
    OPEN = "open"  # held: nothing is attempted until the cool-down ends
    HALF_OPEN = "half-open"  # the cool-down ended: one delivery goes out as a probe
