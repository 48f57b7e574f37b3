"""What attempts do to their partners (``settle.effects``): pure data, written by ``partners.apply``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.states import AttemptOutcome, CircuitChange, PartnerStatus
from service.webhooks.breaker import BreakerPolicy, BreakerState
from service.webhooks.claim import Job
from service.webhooks.partners import PartnerEffect, Standing
from service.webhooks.settle import Settlement, changes, effects

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
POLICY = BreakerPolicy(failures=2, cooldown=30.0, disable_after=3600.0)
ACTIVE = Standing(PartnerStatus.ACTIVE, BreakerState())


def attempt(partner: str, outcome: AttemptOutcome, second: int, *, probe: bool = False) -> Settlement:
    job = Job("dlv", "evt", "room.claimed", partner, "https://x.example/", b"{}", 1, ("s",), "tok", T0, probe)
    at = T0 + timedelta(seconds=second)
    return Settlement(job, at, 5, None, None, None, outcome, at)


def test_successes_of_a_healthy_partner_change_nothing() -> None:
    assert effects([attempt("a", AttemptOutcome.DELIVERED, 1)] * 3, {"a": ACTIVE}, POLICY) == []


def test_failures_open_the_circuit_in_the_order_they_finished() -> None:
    records = [attempt("a", AttemptOutcome.RETRY, 2), attempt("a", AttemptOutcome.RETRY, 1)]
    [effect] = effects(records, {"a": ACTIVE}, POLICY)
    opened = BreakerState(2, T0 + timedelta(seconds=1), T0 + timedelta(seconds=32), 30.0)
    assert effect == PartnerEffect("a", breaker=opened, changes=(CircuitChange.OPENED,))
    assert changes([effect]) == [("a", CircuitChange.OPENED)]


def test_a_410_pauses_an_active_partner_and_moves_no_circuit() -> None:
    [effect] = effects([attempt("a", AttemptOutcome.PAUSED, 1)], {"a": ACTIVE}, POLICY)
    assert effect == PartnerEffect("a", pause=True)


def test_a_partner_already_paused_is_neither_paused_nor_disabled_again() -> None:
    failing = BreakerState(9, T0 - timedelta(hours=2), None, None)
    standing = {"a": Standing(PartnerStatus.PAUSED, failing)}
    records = [attempt("a", AttemptOutcome.PAUSED, 1), attempt("a", AttemptOutcome.RETRY, 2)]
    [effect] = effects(records, standing, POLICY)
    assert (effect.pause, effect.disable, CircuitChange.DISABLED in effect.changes) == (False, False, False)
    assert effect.breaker is not None and effect.breaker.consecutive_failures == 10


def test_failing_too_long_disables_an_active_partner_unless_it_paused_itself() -> None:
    failing = Standing(PartnerStatus.ACTIVE, BreakerState(9, T0 - timedelta(hours=2), None, None))
    [disabled] = effects([attempt("a", AttemptOutcome.RETRY, 1)], {"a": failing}, POLICY)
    assert disabled.disable and CircuitChange.DISABLED in disabled.changes
    gone = [attempt("a", AttemptOutcome.RETRY, 1), attempt("a", AttemptOutcome.PAUSED, 2)]
    [paused] = effects(gone, {"a": failing}, POLICY)
    assert (paused.pause, paused.disable, CircuitChange.DISABLED in paused.changes) == (True, False, False)


def test_a_partner_removed_meanwhile_is_left_out() -> None:
    assert effects([attempt("gone", AttemptOutcome.RETRY, 1)], {}, POLICY) == []
