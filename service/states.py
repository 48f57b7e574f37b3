"""The words of the delivery state machine, each defined once.

Delivery states::

    pending ──claim──▶ delivering ──2xx──▶ delivered
       ▲                   │
       └──retry scheduled──┤──schedule spent──▶ failed ──admin retry/replay──▶ pending
                           └──410 (partner paused; due again on resume)──▶ pending

    pending, delivering ──partner removed──▶ cancelled (never sent again)
    delivered, failed ──admin resend (replay: by window)──▶ pending

A ``pending`` delivery waits for its time, or for its partner to be resumed.

Batched kinds (``service.webhooks.batching``) wait first as ``batching``; once their batch is
formed they are ``batched`` (their ``batch_id`` names the batch's own delivery, which goes through
the states above) and they follow the batch to ``delivered`` or ``failed``. Storage, indexes,
metrics and the admin API all use these members, never bare strings.
"""

from __future__ import annotations

from enum import StrEnum


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    FAILED = "failed"
    BATCHING = "batching"  # a batched kind waiting for its batch to form
    BATCHED = "batched"  # in a formed batch: sent as part of the batch's own delivery
    CANCELLED = "cancelled"  # its partner was removed: never sent


# Settled: nothing will happen to these unless an admin asks (resend, replay, retry); what
# retention prunes once old enough. Not `batching` or `batched`: those wait for their batch.
SETTLED = (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.CANCELLED)
# What a replay may requeue: a removed partner's cancelled deliveries stay cancelled.
REPLAYABLE = (DeliveryStatus.FAILED, DeliveryStatus.DELIVERED)

# What a worker may claim: waiting rows, and claimed rows whose lease ran out (their worker died).
CLAIMABLE = (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)
# The same set as the SQL the claimable partial indexes and their queries test, word for word
# (literal, not bound: a planner proves a partial index applies only from literal text).
CLAIMABLE_IN = "IN ({})".format(", ".join(f"'{status}'" for status in CLAIMABLE))


class AttemptOutcome(StrEnum):
    """What one logged attempt did to its delivery (the metrics counter uses the same words)."""

    DELIVERED = "delivered"
    RETRY = "retry"  # another attempt is scheduled
    FAILED = "failed"  # the schedule is spent
    PAUSED = "paused"  # the partner answered 410 and was paused


class HandedBack(StrEnum):
    """Why a worker handed a claimed delivery back unsent, to be claimed again (the metrics counter
    uses the same words)."""

    LATE = "late"  # it could no longer start with a whole attempt left in its lease
    CHANGED = "changed"  # its partner changed since the claim: paused, a new URL, secret or cap...
    STOPPED = "stopped"  # its partner's attempts opened its circuit, disabled or paused it
    STOPPING = "stopping"  # the worker is stopping


class CircuitChange(StrEnum):
    """What an attempt did to its partner's circuit (``service.webhooks.breaker``), for logs and
    metrics (the counter uses the same words)."""

    OPENED = "opened"
    REOPENED = "reopened"  # a probe failed
    CLOSED = "closed"
    DISABLED = "disabled"  # failing without a break for too long: the partner was disabled


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
    # Removed by an admin: kept (without its secret) so its deliveries' history still names it,
    # hidden from every listing, never sent to again.
    REMOVED = "removed"


class Circuit(StrEnum):
    """A partner's circuit breaker, as the partner resource shows it."""

    CLOSED = "closed"  # deliveries go out
    OPEN = "open"  # held: nothing is attempted until the cool-down ends
    HALF_OPEN = "half-open"  # the cool-down ended: one delivery goes out as a probe
