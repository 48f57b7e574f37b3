"""The demo's scenario is data: the same seed plans the same actions, and partners answer by rule."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from service.demo import scenario
from service.demo.scenario import OK, RETIRED, Answer

SEED = 7
SIZES = {"registrations": 500, "events": 80}
PARTNERS = {spec.name: spec for spec in scenario.PARTNERS}
BEFORE_GONE = scenario.GONE_AT - timedelta(seconds=1)


def test_plan_is_a_function_of_the_seed() -> None:
    """The same seed plans the same actions; another seed plans others."""
    assert scenario.plan(SEED, **SIZES) == scenario.plan(SEED, **SIZES)
    assert scenario.plan(SEED, **SIZES) != scenario.plan(SEED + 1, **SIZES)


def test_digest_is_a_function_of_the_seed_and_sizes() -> None:
    """The digest repeats for the same plan and differs for another seed or size."""
    first = scenario.digest(SEED, **SIZES)
    assert first == scenario.digest(SEED, **SIZES)
    assert first != scenario.digest(SEED + 1, **SIZES)
    assert first != scenario.digest(SEED, registrations=501, events=80)


def test_the_flaky_partner_goes_down_and_comes_back_in_the_plan() -> None:
    """Each partner's down window becomes two actions at its two moments."""
    actions = scenario.plan(SEED, **SIZES).actions
    outages = [(at, action) for at, action in actions if isinstance(action, scenario.Outage)]
    assert outages == [
        (scenario.OUTAGE[0], scenario.Outage(scenario.FLAKY, down=True)),
        (scenario.OUTAGE[1], scenario.Outage(scenario.FLAKY, down=False)),
    ]


@pytest.mark.parametrize(
    ("partner", "draw", "at", "expected"),
    [
        (scenario.HEALTHY, 0.1, BEFORE_GONE, Answer(delay=scenario.PROMPT_REPLY)),
        (scenario.HEALTHY, 0.2, BEFORE_GONE, OK),
        (scenario.FLAKY, 0.0, BEFORE_GONE, Answer(500, "internal error")),
        (scenario.FLAKY, 0.2, BEFORE_GONE, Answer(503, "busy, come back later", (("Retry-After", "90"),))),
        (scenario.FLAKY, 0.3, BEFORE_GONE, OK),
        (scenario.SLOW, 0.05, BEFORE_GONE, Answer(body="ok", delay=scenario.HANG)),
        (scenario.SLOW, 0.25, BEFORE_GONE, Answer(body="ok", delay=scenario.SLOW_REPLY)),
        (scenario.SLOW, 0.99, BEFORE_GONE, OK),
        (scenario.GONE, 0.0, BEFORE_GONE, OK),
        (scenario.GONE, 0.0, scenario.GONE_AT, RETIRED),
        (scenario.GONE, 0.99, scenario.GONE_AT + timedelta(days=9), RETIRED),
    ],
)
def test_partners_answer_by_their_rules(partner: str, draw: float, at: datetime, expected: Answer) -> None:
    """A draw falls to the first answer whose bound it is under; a retired partner answers 410."""
    assert PARTNERS[partner].answer(draw, at) == expected
