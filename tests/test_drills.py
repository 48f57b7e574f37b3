"""Short versions of the drills (``benchmarks.drills``), so ``make drills`` cannot rot unnoticed.

Each runs the real service as child processes on loopback and asserts the numbers the drill proves,
not just that it ran. PostgreSQL and Redis parts skip, with the reason, where the suite has none.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.drills import delivery, hostile, network, partners, ratelimit, registrations
from benchmarks.drills.report import Report

pytestmark = pytest.mark.slow

POSTGRES_URL = os.environ.get("SERVICE_TEST_POSTGRES_URL")
REDIS_URL = os.environ.get("SERVICE_TEST_REDIS_URL")
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def _postgres(kind: str) -> str | None:
    if kind == "postgresql" and not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to drill against")
    return POSTGRES_URL if kind == "postgresql" else None


def _proved(report: Report) -> Report:
    report.print()  # shown by pytest when the test fails
    assert report.skipped is None
    assert report.problems == []
    return report


@pytest.mark.parametrize("kind", BACKENDS)
def test_sigkilled_server_loses_no_answered_registration(kind: str, tmp_path: Path) -> None:
    """Two SIGKILLs under load from 12 clients: every registration answered 200 is stored, once."""
    plan = registrations.SHORT
    numbers = _proved(registrations.run(kind, tmp_path, plan, _postgres(kind))).numbers
    assert numbers["SIGKILLs"] == plan.kills
    assert numbers["registrations answered 200"] >= plan.kills * plan.answers_per_round // 2
    assert numbers["answered 200 but missing"] == 0
    assert numbers["rows stored"] >= numbers["registrations answered 200"]
    assert numbers["other statuses"] == {}


@pytest.mark.parametrize("kind", BACKENDS)
def test_every_event_reaches_every_partner_through_failures_and_kills(kind: str, tmp_path: Path) -> None:
    """A flaky receiver and SIGKILLed workers: all deliveries accepted, signed, byte-identical."""
    plan = delivery.SHORT
    report = _proved(delivery.run(kind, tmp_path, plan, _postgres(kind)))
    numbers = report.numbers
    expected = plan.events * 2
    assert numbers["deliveries"] == expected
    assert numbers["deliveries by state"] == {"delivered": expected}
    assert numbers["attempts logged by outcome"]["delivered"] == expected
    assert numbers["arrivals at the receiver"] > expected  # the receiver failed some on purpose
    assert numbers["retries (arrivals after a failed answer)"] > 0
    kills, restarts = (int(part) for part in numbers["SIGKILLs / restarts"].split(" / "))
    assert kills >= plan.kills and restarts == kills
    assert any("verify with signing.verify" in claim for claim in report.proved)
    assert any("bytes of its first arrival" in claim for claim in report.proved)


@pytest.mark.parametrize("kind", BACKENDS)
def test_hostile_partners_hold_up_no_healthy_one(kind: str, tmp_path: Path) -> None:
    """Partners that hang, answer garbage, reset, send NUL bytes or a huge header, beside two healthy
    ones, workers SIGKILLed: every healthy delivery arrives, nothing is lost, excerpts stored clean,
    hostile circuits open."""
    plan = partners.SHORT
    report = _proved(partners.run(kind, tmp_path, plan, _postgres(kind)))
    numbers = report.numbers
    healthy = {name: {"delivered": plan.events} for name in partners.HEALTHY}
    states = numbers["deliveries by partner and state"]
    assert {name: states[name] for name in partners.HEALTHY} == healthy
    assert all(sum(states[name].values()) == plan.events for name in partners.HOSTILE)
    assert all(states[name].get("delivered", 0) == 0 for name in partners.HOSTILE)
    errors = numbers["attempts by partner and error class"]
    assert errors["nul"].get("http_503", 0) > 0
    assert errors["hang"].get("timeout", 0) > 0
    assert all(numbers["connections to each hostile partner"][name] > 0 for name in partners.HOSTILE)
    kills, restarts = (int(part) for part in numbers["SIGKILLs / restarts"].split(" / "))
    assert kills >= plan.kills and restarts == kills
    assert any("circuit is open" in claim for claim in report.proved)
    assert any("plain text" in claim for claim in report.proved)


def test_schemathesis_finds_no_server_error_or_schema_violation(tmp_path: Path) -> None:
    """Every schemathesis phase and check: no 5xx, no violation; throttled 429s match the document."""
    report = _proved(hostile.run(tmp_path, hostile.SHORT))
    numbers = report.numbers
    assert numbers["cases"] >= 400
    for phase in ("coverage", "fuzzing", "stateful_testing"):
        assert phase in numbers["cases, every operation"]
    assert numbers["5xx answers"] == 0
    assert numbers["check failures"] == 0
    assert numbers["throttled run: answers by status"].get(429, 0) > 0
    assert numbers["throttled run: check failures"] == 0


@pytest.mark.redis
def test_two_processes_sharing_redis_enforce_one_limit(tmp_path: Path) -> None:
    """Two servers, one Redis, one client: exactly 20 of 60 accepted, the rest 429 with Retry-After."""
    if not REDIS_URL:
        pytest.skip("SERVICE_TEST_REDIS_URL is not set: no Redis to drill against")
    plan = ratelimit.SHORT
    numbers = _proved(ratelimit.run(tmp_path, plan, REDIS_URL)).numbers
    assert numbers["answers by status"] == {200: plan.limit, 429: plan.requests - plan.limit}
    assert numbers["rows stored"] == plan.limit
    assert all(count > 0 for count in numbers["accepted per server"].values())


def test_a_network_that_lies_costs_bounded_503s_and_loses_nothing(tmp_path: Path) -> None:
    """A silent database link, a frozen database and Redis down, one after the other: /readyz falls
    within 15 s naming the part, service resumes within 30 s of each heal with no restart, every 200
    is stored and every accepted event delivered."""
    if not POSTGRES_URL or not REDIS_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL and SERVICE_TEST_REDIS_URL are needed for this drill")
    report = _proved(network.run(tmp_path, network.SHORT, POSTGRES_URL, REDIS_URL))
    numbers = report.numbers
    for fault in ("silent link", "frozen database", "Redis down"):
        assert numbers[f"{fault}: /readyz 503 after (s)"] <= network.READY_FALLS_WITHIN
        assert numbers[f"{fault}: first 200 after the heal (s)"] <= network.RESUMES_WITHIN
    assert numbers["answered 200 but missing"] == 0
    assert numbers["slowest answer (s)"] <= network.ANSWER_WITHIN
    assert numbers["events accepted (202)"] > 0
