"""The circuit breaker of one partner, as plain data and one pure function over it.

A partner failing attempt after attempt (timeouts, refused connections, 5xx) should cost the
platform as little as possible and be told apart from one that is merely slow today:

- ``failures`` failed attempts in a row open the circuit: the partner's deliveries are held (not
  attempted, their retry schedules not spent) for ``cooldown`` seconds;
- then one due delivery goes out as a probe (the circuit is half-open): success closes the circuit
  and releases the backlog; failure opens it again for twice the last cool-down, at most
  ``max_cooldown``;
- a partner failing without a break for ``disable_after`` seconds is disabled; only an admin's
  resume lifts that.

An admin's resume means "try this partner now" (``resumed``): an open circuit becomes half-open at
once, so one probe goes out without waiting for the cool-down; its failure re-opens the circuit for
the cool-down it had, not twice that (the operator asked for the probe; the partner did nothing to
earn a longer wait).

``after_attempt`` is the whole state machine. Storage reads a partner's state, folds the batch's
attempts through it in the order they finished, and writes the result back in the same
transaction (``service.webhooks.settle.record``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from service.states import Circuit, CircuitChange

MAX_COOLDOWN = 3600.0  # seconds: a probe at least once an hour, however long the partner is down


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failures: int = 5
    cooldown: float = 30.0
    disable_after: float = 432000.0
    max_cooldown: float = MAX_COOLDOWN


@dataclass(frozen=True, slots=True)
class BreakerState:
    consecutive_failures: int = 0
    failing_since: datetime | None = None
    open_until: datetime | None = None  # None: closed
    cooldown: float | None = None  # the current (or last) open period, seconds


# The changes after which the partner's queued deliveries wait: nothing more goes out until a probe.
STOPPING = frozenset({CircuitChange.OPENED, CircuitChange.REOPENED, CircuitChange.DISABLED})


def circuit(state: BreakerState, now: datetime) -> Circuit:
    if state.open_until is None:
        return Circuit.CLOSED
    return Circuit.OPEN if state.open_until > now else Circuit.HALF_OPEN


def after_attempt(
    state: BreakerState, *, ok: bool, probe: bool, at: datetime, policy: BreakerPolicy
) -> tuple[BreakerState, list[CircuitChange]]:
    """The state after one attempt that finished at ``at``, and what changed.

    ``probe`` says the attempt was claimed while the circuit was half-open. Attempts that were
    already in flight when the circuit opened still count as failures but do not move the
    cool-down: only a probe's answer does, and only while the circuit is not closed: a probe
    whose circuit an admin's resume (or another attempt's delivery) closed meanwhile fails as any
    attempt does, one failure of a fresh count.
    """
    if ok:
        return BreakerState(), [CircuitChange.CLOSED] if state.open_until is not None else []
    failing_since = state.failing_since or at
    failed = replace(state, consecutive_failures=state.consecutive_failures + 1, failing_since=failing_since)
    changes: list[CircuitChange] = []
    if probe and state.open_until is not None:
        cooldown = min(2 * (state.cooldown or policy.cooldown), policy.max_cooldown)
        failed = replace(failed, open_until=at + timedelta(seconds=cooldown), cooldown=cooldown)
        changes.append(CircuitChange.REOPENED)
    elif state.open_until is None and failed.consecutive_failures >= policy.failures:
        failed = replace(failed, open_until=at + timedelta(seconds=policy.cooldown), cooldown=policy.cooldown)
        changes.append(CircuitChange.OPENED)
    if at - failing_since >= timedelta(seconds=policy.disable_after):
        changes.append(CircuitChange.DISABLED)
    return failed, changes


def resumed(state: BreakerState, now: datetime, *, lift_disable: bool = False) -> BreakerState:
    """The state after an admin's resume at ``now``.

    An open circuit (its cool-down still running) turns half-open now: the next claim takes one
    probe. A failed probe doubles the stored cool-down, so it is stored halved here: the probe's
    failure then re-opens the circuit for exactly the cool-down it had. The failures stay counted;
    ``lift_disable`` (the partner was disabled) restarts the clock of ``disable_after``, or the
    probe's failure would disable it again at once.

    A closed or already half-open circuit starts afresh: closed, no failures counted.
    """
    if state.open_until is None or state.open_until <= now:
        return BreakerState()
    cooldown = state.cooldown / 2 if state.cooldown is not None else None
    failing_since = None if lift_disable else state.failing_since
    return replace(state, open_until=now, cooldown=cooldown, failing_since=failing_since)
