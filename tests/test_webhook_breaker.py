"""The circuit breaker as a pure function: opening, probing, closing, disabling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.states import Circuit, CircuitChange
from service.webhooks.breaker import BreakerPolicy, BreakerState, after_attempt, circuit

T0 = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)
POLICY = BreakerPolicy(failures=3, cooldown=30, disable_after=3600, max_cooldown=100)


def fail(state: BreakerState, seconds: float, *, probe: bool = False) -> tuple[BreakerState, list[CircuitChange]]:
    return after_attempt(state, ok=False, probe=probe, at=T0 + timedelta(seconds=seconds), policy=POLICY)


def test_failures_in_a_row_open_the_circuit_for_the_cooldown() -> None:
    """The third failure opens it until 30 s later; until then it is open, then half-open."""
    state = BreakerState()
    state, changes = fail(state, 0)
    state, changes = fail(state, 1)
    assert changes == [] and circuit(state, T0) is Circuit.CLOSED
    state, changes = fail(state, 2)
    assert changes == [CircuitChange.OPENED]
    assert state == BreakerState(3, T0, T0 + timedelta(seconds=32), 30)
    assert circuit(state, T0 + timedelta(seconds=31)) is Circuit.OPEN
    assert circuit(state, T0 + timedelta(seconds=32)) is Circuit.HALF_OPEN


def test_a_failed_probe_doubles_the_cooldown_up_to_its_ceiling() -> None:
    """30 s, then 60, then 100 (the ceiling), then 100 again."""
    state = BreakerState(3, T0, T0 + timedelta(seconds=30), 30)
    cooldowns = []
    for moment in (30, 100, 300, 500):
        state, changes = fail(state, moment, probe=True)
        assert changes == [CircuitChange.REOPENED]
        cooldowns.append(state.cooldown)
    assert cooldowns == [60, 100, 100, 100]
    assert state.open_until == T0 + timedelta(seconds=600)


def test_stragglers_count_but_do_not_move_the_cooldown() -> None:
    """Attempts already in flight when the circuit opened fail without reopening it."""
    opened = BreakerState(3, T0, T0 + timedelta(seconds=30), 30)
    state, changes = fail(opened, 5)
    assert changes == []
    assert (state.consecutive_failures, state.open_until, state.cooldown) == (4, opened.open_until, 30)


def test_a_probe_whose_circuit_closed_meanwhile_fails_as_any_attempt() -> None:
    """Resumed while its probe was out (the circuit closed, nothing counted), the probe's failure
    is the first of a fresh count: no reopening, no doubled cool-down."""
    state, changes = fail(BreakerState(), 40, probe=True)
    assert changes == []
    assert state == BreakerState(1, T0 + timedelta(seconds=40), None, None)
    state, changes = fail(state, 41, probe=True)
    state, changes = fail(state, 42, probe=True)
    assert changes == [CircuitChange.OPENED]  # the third in a row, as for any partner
    assert (state.open_until, state.cooldown) == (T0 + timedelta(seconds=72), 30)


def test_a_success_closes_and_forgets() -> None:
    """One 2xx closes an open circuit and clears the count; on a healthy partner it changes nothing."""
    opened = BreakerState(7, T0, T0 + timedelta(seconds=30), 60)
    state, changes = after_attempt(opened, ok=True, probe=True, at=T0, policy=POLICY)
    assert (state, changes) == (BreakerState(), [CircuitChange.CLOSED])
    assert after_attempt(BreakerState(), ok=True, probe=False, at=T0, policy=POLICY) == (BreakerState(), [])


@pytest.mark.parametrize(("seconds", "disabled"), [(3599, False), (3600, True)])
def test_unbroken_failure_for_disable_after_disables(seconds: float, disabled: bool) -> None:
    """Failing since T0: a failure at T0 + disable_after says disable, a second earlier does not."""
    state = BreakerState(3, T0, T0 + timedelta(seconds=30), 30)
    _, changes = fail(state, seconds, probe=True)
    assert (CircuitChange.DISABLED in changes) is disabled
