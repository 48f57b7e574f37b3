"""Delivery analyses on small hand-made frames with answers worked out by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from analytics import deliveries, load
from analytics.deliveries import By

UTC_TIME = "datetime64[us, UTC]"


def utc(*stamps: str | None) -> pd.Series:
    return pd.Series(pd.to_datetime(list(stamps), utc=True)).astype(UTC_TIME)


def delivery_frame() -> pd.DataFrame:
    # Delivered in 2 s, 30 s and 120 s; d2 gave up, d5 is still pending.
    return pd.DataFrame(
        {
            "id": ["d1", "d2", "d3", "d4", "d5"],
            "event": ["order.created", "order.created", "waitlist.joined", "order.created", "order.created"],
            "partner_name": ["Acme", "Acme", "Acme", "Beta", "Beta"],
            "status": ["delivered", "failed", "delivered", "delivered", "pending"],
            "attempts": [1, 3, 2, 4, 0],
            "created_at": utc(
                "2024-03-01T10:00:00",
                "2024-03-01T10:00:00",
                "2024-03-01T10:00:00",
                "2024-03-01T10:01:00",
                "2024-03-01T10:02:00",
            ),
            "delivered_at": utc(
                "2024-03-01T10:00:02", None, "2024-03-01T10:00:30", "2024-03-01T10:03:00", None
            ),
        }
    )


def attempt_frame() -> pd.DataFrame:
    # The attempts behind delivery_frame(); d5 has none yet.
    rows = [
        ("d1", "order.created", "Acme", 120, 200, None, "delivered"),
        ("d2", "order.created", "Acme", 5000, None, "timeout", "retry"),
        ("d2", "order.created", "Acme", 300, 500, "http_500", "retry"),
        ("d2", "order.created", "Acme", 250, 500, "http_500", "failed"),
        ("d3", "waitlist.joined", "Acme", 80, None, "connect", "retry"),
        ("d3", "waitlist.joined", "Acme", 100, 200, None, "delivered"),
        ("d4", "order.created", "Beta", 410, 503, "http_503", "retry"),
        ("d4", "order.created", "Beta", 4000, None, "timeout", "retry"),
        ("d4", "order.created", "Beta", 390, 503, "http_503", "retry"),
        ("d4", "order.created", "Beta", 200, 200, None, "delivered"),
    ]
    columns = ["delivery_id", "event", "partner_name", "duration_ms", "status_code", "error_class", "outcome"]
    return pd.DataFrame(rows, columns=columns).astype({"status_code": "Int64"})


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (
            ("partner_name", "event"),
            {
                "partner_name": ["Acme", "Acme", "Beta"],
                "event": ["order.created", "waitlist.joined", "order.created"],
                "attempts": [4, 2, 4],
                "succeeded": [1, 1, 1],
                "success_rate": [0.25, 0.5, 0.25],
            },
        ),
        ("partner_name", {"partner_name": ["Acme", "Beta"], "attempts": [6, 4], "succeeded": [2, 1], "success_rate": [0.3333, 0.25]}),
        (None, {"attempts": [10], "succeeded": [3], "success_rate": [0.3]}),
        ((), {"attempts": [10], "succeeded": [3], "success_rate": [0.3]}),
    ],
)
def test_success_rate_is_the_share_of_attempts_answered_2xx(by: By, expected: dict[str, list[object]]) -> None:
    """Every attempt counts, retries included: a delivery that took four tries is one success in four."""
    assert_frame_equal(deliveries.success_rate(attempt_frame(), by=by), pd.DataFrame(expected))


def test_success_rate_keeps_a_missing_partner() -> None:
    """An attempt whose partner row is gone is its own group, not silently dropped."""
    frame = attempt_frame().astype({"partner_name": "str"})
    frame.loc[9, "partner_name"] = None
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Beta", None],
            "attempts": [6, 3, 1],
            "succeeded": [2, 0, 1],
            "success_rate": [0.3333, 0.0, 1.0],
        }
    ).astype({"partner_name": "str"})
    assert_frame_equal(deliveries.success_rate(frame, by="partner_name"), expected)


def test_success_rate_refuses_a_deliveries_frame() -> None:
    """Success is read from attempts; a deliveries frame (status, no outcome) is a mistake worth naming."""
    with pytest.raises(ValueError, match="attempts frame"):
        deliveries.success_rate(delivery_frame())


def test_attempts_to_success() -> None:
    """Tries per delivered delivery, every count from 1 to the most present."""
    expected = pd.DataFrame(
        {"attempts": [1, 2, 3, 4], "deliveries": [1, 1, 0, 1], "share": [0.3333, 0.3333, 0.0, 0.3333]}
    )
    assert_frame_equal(deliveries.attempts_to_success(delivery_frame()), expected)


def test_attempts_to_success_with_nothing_delivered() -> None:
    """No delivered deliveries give an empty, typed distribution."""
    frame = delivery_frame().assign(status="failed")
    expected = pd.DataFrame(
        {
            "attempts": pd.Series([], dtype="int64"),
            "deliveries": pd.Series([], dtype="int64"),
            "share": pd.Series([], dtype="float64"),
        }
    )
    assert_frame_equal(deliveries.attempts_to_success(frame), expected)


@pytest.mark.parametrize(
    ("by", "percentiles", "expected"),
    [
        (None, (50, 90, 99), {"attempts": [10], "p50": [275.0], "p90": [4100.0], "p99": [4910.0]}),
        (
            "partner_name",
            (50, 90, 99),
            {
                "partner_name": ["Acme", "Beta"],
                "attempts": [6, 4],
                "p50": [185.0, 400.0],
                "p90": [2650.0, 2923.0],
                "p99": [4765.0, 3892.3],
            },
        ),
        (None, (0, 99.9, 100), {"attempts": [10], "p0": [80.0], "p99.9": [4991.0], "p100": [5000.0]}),
    ],
)
def test_latency_percentiles(by: By, percentiles: Sequence[float], expected: dict[str, list[object]]) -> None:
    """Linear-interpolated percentiles of duration_ms, overall or per group."""
    result = deliveries.latency_percentiles(attempt_frame(), by=by, percentiles=percentiles)
    assert_frame_equal(result, pd.DataFrame(expected))


@pytest.mark.parametrize("percentile", [-1, 100.5])
def test_latency_percentiles_refuses_out_of_range(percentile: float) -> None:
    """Percentiles outside 0..100 are refused rather than clipped."""
    with pytest.raises(ValueError, match="between 0 and 100"):
        deliveries.latency_percentiles(attempt_frame(), percentiles=(percentile,))


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (
            None,
            {
                "error_class": ["http_500", "http_503", "timeout", "connect"],
                "status_code": pd.array([500, 503, None, None], dtype="Int64"),
                "attempts": [2, 2, 2, 1],
                "share": [0.2, 0.2, 0.2, 0.1],
            },
        ),
        (
            "partner_name",
            {
                "partner_name": ["Acme", "Acme", "Acme", "Beta", "Beta"],
                "error_class": ["http_500", "connect", "timeout", "http_503", "timeout"],
                "status_code": pd.array([500, None, None, 503, None], dtype="Int64"),
                "attempts": [2, 1, 1, 2, 1],
                "share": [0.3333, 0.1667, 0.1667, 0.5, 0.25],
            },
        ),
    ],
)
def test_failure_reasons(by: By, expected: dict[str, object]) -> None:
    """Attempts that did not succeed by class and code, most first, ties by class, no answer as NA;
    shares are of the group's attempts, so they and its success rate add up to 1."""
    found = deliveries.failure_reasons(attempt_frame(), by=by)
    assert_frame_equal(found, pd.DataFrame(expected))
    rates = deliveries.success_rate(attempt_frame(), by=by)["success_rate"].tolist()
    lost = found.groupby(by)["share"].sum().tolist() if by else [found["share"].sum()]
    assert [round(a + b, 3) for a, b in zip(lost, rates, strict=True)] == [1.0] * len(rates)


def test_latency_bands() -> None:
    """The share of each partner's attempts per band of the step, every band up to the slowest."""
    # Acme: 80 100 120 250 300 5000 ms; Beta: 200 390 410 4000 ms. Steps of 1000 ms.
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Beta"],
            "attempts": [6, 4],
            "0-999 ms": [0.8333, 0.75],
            "1000-1999 ms": [0.0, 0.0],
            "2000-2999 ms": [0.0, 0.0],
            "3000-3999 ms": [0.0, 0.0],
            "4000-4999 ms": [0.0, 0.25],
            "5000-5999 ms": [0.1667, 0.0],
        }
    )
    assert_frame_equal(deliveries.latency_bands(attempt_frame(), step_ms=1000), expected)


def test_latency_bands_tell_apart_endpoints_whose_medians_agree() -> None:
    """Both answer most attempts at once (same median band); the bands show which one is often slow."""
    frame = pd.DataFrame(
        {"partner_name": ["Fast"] * 4 + ["Slow"] * 4, "duration_ms": [3, 4, 2, 5, 3, 104, 2, 201]}
    )
    expected = pd.DataFrame(
        {
            "partner_name": ["Fast", "Slow"],
            "attempts": [4, 4],
            "0-49 ms": [1.0, 0.5],
            "50-99 ms": [0.0, 0.0],
            "100-149 ms": [0.0, 0.25],
            "150-199 ms": [0.0, 0.0],
            "200-249 ms": [0.0, 0.25],
        }
    )
    assert_frame_equal(deliveries.latency_bands(frame), expected)
    medians = deliveries.latency_percentiles(frame, by="partner_name", percentiles=(50,), resolution_ms=50)
    assert medians["p50"].tolist() == [0, 0]


def test_latency_bands_refuse_a_step_below_one() -> None:
    """A step is a positive number of milliseconds."""
    with pytest.raises(ValueError, match="positive"):
        deliveries.latency_bands(attempt_frame(), step_ms=0)


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (
            "partner_name",
            {"partner_name": ["Acme", "Beta"], "deliveries": [2, 1], "under 1 s": [0.0, 0.0],
             "1 s-1 min": [1.0, 0.0], "1-10 min": [0.0, 1.0], "10 min-1 h": [0.0, 0.0], "over 1 h": [0.0, 0.0]},
        ),
        (
            None,
            {"deliveries": [3], "under 1 s": [0.0], "1 s-1 min": [0.6667], "1-10 min": [0.3333],
             "10 min-1 h": [0.0], "over 1 h": [0.0]},
        ),
    ],
)  # fmt: skip
def test_time_to_delivery_bands(by: By, expected: dict[str, list[object]]) -> None:
    """Of each group's delivered deliveries (2 s, 30 s; 120 s), the share per band, every band a column."""
    assert_frame_equal(deliveries.time_to_delivery_bands(delivery_frame(), by=by), pd.DataFrame(expected))


def test_time_to_delivery_bands_start_and_end_at_their_edges() -> None:
    """A band includes its lower edge: exactly 1 s is "1 s-1 min", exactly an hour is "over 1 h"."""
    frame = delivery_frame().iloc[:1].assign(status="delivered")
    for seconds, band in [(0.999, "under 1 s"), (1, "1 s-1 min"), (3599.9, "10 min-1 h"), (3600, "over 1 h")]:
        timed = frame.assign(delivered_at=frame["created_at"] + pd.Timedelta(seconds=seconds))
        found = deliveries.time_to_delivery_bands(timed, by=None)
        assert found.loc[0, band] == 1.0, (seconds, band)


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (None, {"deliveries": [3], "p50": [30.0], "p90": [102.0], "p99": [118.2]}),
        (
            "partner_name",
            {
                "partner_name": ["Acme", "Beta"],
                "deliveries": [2, 1],
                "p50": [16.0, 120.0],
                "p90": [27.2, 120.0],
                "p99": [29.72, 120.0],
            },
        ),
    ],
)
def test_time_to_delivery(by: By, expected: dict[str, list[object]]) -> None:
    """Seconds from created to delivered, for delivered deliveries only."""
    assert_frame_equal(deliveries.time_to_delivery(delivery_frame(), by=by), pd.DataFrame(expected))


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (
            "partner_name",
            {"partner_name": ["Acme", "Beta"], "delivered": [2, 1], "retried": [1, 1], "share": [0.5, 1.0]},
        ),
        (None, {"delivered": [3], "retried": [2], "share": [0.6667]}),
    ],
)
def test_retries_that_succeeded(by: By, expected: dict[str, list[object]]) -> None:
    """Delivered deliveries that took more than one attempt, as a count and a share."""
    result = deliveries.retries_that_succeeded(delivery_frame(), by=by)
    assert_frame_equal(result, pd.DataFrame(expected))


@pytest.mark.parametrize(
    ("resolution", "expected"),
    [
        # Acme's durations sorted: 80 100 120 250 300 5000; Beta's: 200 390 410 4000.
        (
            50,
            {
                "partner_name": ["Acme", "Beta"],
                "attempts": [6, 4],
                "p50": [100, 350],
                "p90": [300, 400],
                "p99": [300, 400],
            },
        ),
        (
            1,
            {
                "partner_name": ["Acme", "Beta"],
                "attempts": [6, 4],
                "p50": [120, 390],
                "p90": [300, 410],
                "p99": [300, 410],
            },
        ),
    ],
)
def test_latency_percentiles_at_a_resolution(resolution: int, expected: dict[str, list[object]]) -> None:
    """With a resolution, each percentile is an observed duration (the lower one), rounded down."""
    result = deliveries.latency_percentiles(attempt_frame(), by="partner_name", resolution_ms=resolution)
    assert_frame_equal(result, pd.DataFrame(expected).astype({f"p{p}": "Int64" for p in (50, 90, 99)}))


def test_latency_percentiles_refuse_a_resolution_below_one() -> None:
    """A resolution is a positive number of milliseconds."""
    with pytest.raises(ValueError, match="positive"):
        deliveries.latency_percentiles(attempt_frame(), resolution_ms=0)


def test_states() -> None:
    """Deliveries per state and partner, every state a column, zeros filled, with a total."""
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Beta"],
            "pending": [0, 1],
            "delivering": [0, 0],
            "delivered": [2, 1],
            "failed": [1, 0],
            "batching": [0, 0],
            "batched": [0, 0],
            "cancelled": [0, 0],
            "total": [3, 2],
        }
    )
    assert_frame_equal(deliveries.states(delivery_frame()), expected)


def test_states_overall() -> None:
    """Without grouping, one row for all deliveries."""
    expected = pd.DataFrame(
        {
            "pending": [1],
            "delivering": [0],
            "delivered": [3],
            "failed": [1],
            "batching": [0],
            "batched": [0],
            "cancelled": [0],
            "total": [5],
        }
    )
    assert_frame_equal(deliveries.states(delivery_frame(), by=None), expected)


def test_states_count_events_waiting_for_a_batch_and_any_unknown_status() -> None:
    """Events waiting for their batch (``batching``) or inside one (``batched``) have their columns,
    and a status the service does not define has one too: each was dropped, and the total with it."""
    frame = pd.DataFrame(
        {
            "partner_name": ["Acme", "Acme", "Acme", "Beta", "Beta"],
            "status": ["batching", "batching", "batched", "delivered", "held"],
        }
    )
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Beta"],
            "pending": [0, 0],
            "delivering": [0, 0],
            "delivered": [0, 1],
            "failed": [0, 0],
            "batching": [2, 0],
            "batched": [1, 0],
            "cancelled": [0, 0],
            "held": [0, 1],
            "total": [3, 2],
        }
    )
    assert_frame_equal(deliveries.states(frame), expected)


def attempts_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """The attempt log as ``action_items`` reads it, one row a ``(delivery, partner, status,
    error class, outcome)``."""
    return pd.DataFrame(rows, columns=["delivery_id", "partner_id", "status_code", "error_class", "outcome"]).astype({"status_code": "Int64"})


def test_a_paused_partner_counts_every_event_waiting_for_it() -> None:
    """Paused with events pending, waiting for a batch and inside a pending batch: each event counts
    once, the batch request that carries two of them not beside them; only ``pending`` counted."""
    partners = pd.DataFrame(
        {"id": ["p_gone"], "name": ["Gone"], "status": ["paused"], "updated_at": utc("2024-03-02T08:30:00")}
    )
    log = deliveries.with_batches(
        pd.DataFrame(
            {
                "id": ["e1", "e2", "e3", "e4", "b1", "e5"],
                "partner_id": ["p_gone"] * 6,
                "status": ["pending", "batching", "batched", "batched", "pending", "delivered"],
                "attempts": [0, 0, 0, 0, 1, 1],
            }
        ),
        pd.DataFrame(
            {
                "id": ["e3", "e4", "b1"],
                "batch_id": ["b1", "b1", None],
                "is_batch": [False, False, True],
            }
        ),
    )
    attempts = attempts_frame([("b1", "p_gone", 410, "http_410", "paused")])
    actions = deliveries.action_items(partners, log, attempts)
    assert actions[["partner_name", "issue", "count"]].to_dict("list") == {
        "partner_name": ["Gone"],
        "issue": ["paused"],
        "count": [4],
    }


def test_a_request_is_only_what_goes_out_as_a_post_of_its_own() -> None:
    """Acme sent one event alone, has one to send, two waiting for their batch and two in a batch
    not sent yet: three requests, the two waiting not among them. Gone was removed: of its cancelled
    deliveries only the one tried before counts; neither the pending one nor the one waiting for a
    batch ever went out. Every one of them used to count: 5 requests and 3."""
    log = deliveries.with_batches(
        pd.DataFrame(
            {
                "id": ["s1", "s2", "w1", "w2", "m1", "m2", "b1", "c1", "c2", "c3"],
                "partner_name": ["Acme"] * 7 + ["Gone"] * 3,
                "status": [
                    *("delivered", "pending", "batching", "batching", "batched", "batched", "pending"),
                    *("cancelled", "cancelled", "cancelled"),
                ],
                "attempts": [1, 0, 0, 0, 0, 0, 0, 0, 2, 0],
            }
        ),
        pd.DataFrame(
            {"id": ["m1", "m2", "b1"], "batch_id": ["b1", "b1", None], "is_batch": [False, False, True]}
        ),
    )
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Gone"],
            "events": [6, 3],
            "events_delivered": [1, 0],
            "requests": [3, 1],
            "batch_requests": [1, 0],
            "requests_delivered": [1, 0],
        }
    )
    assert_frame_equal(deliveries.events_and_requests(log), expected)
    assert deliveries.requests_only(log)["id"].tolist() == ["s1", "s2", "b1", "c2"]


def operator_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    # Gone answered 410 and was paused with one delivery waiting; Flaky failed one delivery for
    # good and succeeded on 1 of its 4 attempts; Fine never failed.
    partners = pd.DataFrame(
        {
            "id": ["p_gone", "p_flaky", "p_fine"],
            "name": ["Gone", "Flaky", "Fine"],
            "status": ["paused", "active", "active"],
            "updated_at": utc("2024-03-02T08:30:00", "2024-03-01T00:00:00", "2024-03-01T00:00:00"),
        }
    )
    log = pd.DataFrame(
        {
            "id": ["g1", "g2", "f1", "f2", "ok"],
            "partner_id": ["p_gone", "p_gone", "p_flaky", "p_flaky", "p_fine"],
            "status": ["delivered", "pending", "failed", "delivered", "delivered"],
            "attempts": [1, 1, 2, 2, 1],
        }
    )
    rows = [
        ("g1", "p_gone", 200, None, "delivered"),
        ("g2", "p_gone", 410, "http_410", "paused"),
        ("f1", "p_flaky", None, "connect", "retry"),
        ("f1", "p_flaky", 500, "http_500", "failed"),
        ("f2", "p_flaky", 500, "http_500", "retry"),
        ("f2", "p_flaky", 200, None, "delivered"),
        ("ok", "p_fine", 200, None, "delivered"),
    ]
    attempts = attempts_frame(rows)
    return partners, log, attempts


def test_action_items() -> None:
    """Paused partners first, then failed deliveries, then unreliable endpoints, with commands."""
    expected = pd.DataFrame(
        {
            "partner_name": ["Gone", "Flaky", "Flaky"],
            "issue": ["paused", "failed", "unreliable"],
            "count": [1, 1, 3],
            "detail": [
                "paused 2024-03-02 08:30 UTC after answering 410; resume once the partner says the endpoint is back",
                "retry schedule spent; last errors: http_500: 1",
                "attempt success rate 25%, below 95%; errors: http_500: 2, connect: 1",
            ],
            "command": [
                "python -m service partners resume p_gone",
                "python -m service partners retry p_flaky",
                "python -m service partners test p_flaky",
            ],
        }
    )
    assert_frame_equal(deliveries.action_items(*operator_frames()), expected)


def test_a_pause_is_put_down_to_a_410_only_while_that_answer_holds_it() -> None:
    """Maint answered 410 two weeks ago, was resumed, delivered that event and more, and an admin
    paused it today: the 410 is history. Gone answered 410 and waits, renamed since (a later
    ``updated_at``): the 410 holds it. Again was resumed after a 410 and answered 410 once more."""
    partners = pd.DataFrame(
        {
            "id": ["p_again", "p_gone", "p_maint"],
            "name": ["Again", "Gone", "Maint"],
            "status": ["paused"] * 3,
            "updated_at": utc("2024-03-03T10:00:00", "2024-03-05T09:00:00", "2024-03-14T11:00:00"),
        }
    )
    log = pd.DataFrame(
        {
            "id": ["m0", "m1", "m2", "g1", "a1"],
            "partner_id": ["p_maint", "p_maint", "p_maint", "p_gone", "p_again"],
            "status": ["delivered", "delivered", "pending", "pending", "pending"],
            "attempts": [2, 1, 0, 1, 2],
        }
    )
    rows = [
        ("m0", "p_maint", 410, "http_410", "paused"),
        ("a1", "p_again", 410, "http_410", "paused"),
        ("g1", "p_gone", 410, "http_410", "paused"),
        ("m0", "p_maint", 200, None, "delivered"),
        ("a1", "p_again", 410, "http_410", "paused"),
        ("m1", "p_maint", 200, None, "delivered"),
    ]
    attempts = attempts_frame(rows)
    actions = deliveries.action_items(partners, log, attempts)
    assert actions.set_index("partner_name")["detail"].str.split(";").str[0].to_dict() == {
        "Again": "paused 2024-03-03 10:00 UTC after answering 410",
        "Gone": "paused 2024-03-05 09:00 UTC after answering 410",
        "Maint": "paused 2024-03-14 11:00 UTC by an admin",
    }


def test_a_rate_that_rounds_to_the_threshold_is_still_below_it() -> None:
    """968 of 1,019 attempts is 94.995%, which the table rounds to 0.95: the partner is below 95%
    all the same, and the detail says so in figures that read below it, not "95%, below 95%"."""
    partners = pd.DataFrame(
        {"id": ["p_big"], "name": ["Big"], "status": ["active"], "updated_at": utc("2024-03-01T00:00:00")}
    )
    log = pd.DataFrame({"id": ["d1"], "partner_id": ["p_big"], "status": ["delivered"], "attempts": [1]})
    attempts = pd.DataFrame(
        {
            "delivery_id": ["d1"] * 1019,
            "partner_id": ["p_big"] * 1019,
            "status_code": pd.array([200] * 968 + [503] * 51, dtype="Int64"),
            "error_class": [None] * 968 + ["http_503"] * 51,
            "outcome": ["delivered"] * 968 + ["retry"] * 51,
        }
    )
    assert deliveries.success_rate(attempts, by=None)["success_rate"].tolist() == [0.95]
    actions = deliveries.action_items(partners, log, attempts)
    assert actions[["issue", "count", "detail"]].to_dict("list") == {
        "issue": ["unreliable"],
        "count": [51],
        "detail": ["attempt success rate 94.9%, below 95%; errors: http_503: 51"],
    }


@pytest.mark.parametrize(
    ("rate", "decimals", "shown"),
    [
        (0.94995, 0, "94.9%"),
        (0.94995, 1, "94.99%"),
        (0.9499, 0, "94.9%"),
        (0.8182, 0, "82%"),
        (0.95, 0, "95%"),
        (0.9996, 1, "100.0%"),
    ],
)
def test_a_rate_below_the_threshold_never_reads_as_on_it(rate: float, decimals: int, shown: str) -> None:
    """Rounded as usual, but where that would lift a rate under 95% to 95% it is cut a place further."""
    assert deliveries.percent(rate, 0.95, decimals) == shown


def test_a_disabled_partner_is_an_action_item_and_a_removed_one_never_is() -> None:
    """The service disabled Dead after days of failure, with two deliveries waiting: it heads the
    list, with its resume. Gone was removed by an admin: its failed delivery and poor rate are
    history, and its commands would answer 404, so it is not on the list."""
    partners = pd.DataFrame(
        {
            "id": ["p_dead", "p_gone", "p_fine"],
            "name": ["Dead", "Gone", "Fine"],
            "status": ["disabled", "removed", "active"],
            "updated_at": utc("2024-03-06T09:15:00", "2024-03-02T00:00:00", "2024-03-01T00:00:00"),
        }
    )
    log = pd.DataFrame(
        {
            "id": ["d1", "d2", "g1", "ok"],
            "partner_id": ["p_dead", "p_dead", "p_gone", "p_fine"],
            "status": ["pending", "pending", "failed", "delivered"],
            "attempts": [1, 1, 1, 1],
        }
    )
    rows = [
        ("d1", "p_dead", 503, "http_503", "retry"),
        ("d2", "p_dead", None, "connect", "retry"),
        ("g1", "p_gone", 500, "http_500", "failed"),
        ("ok", "p_fine", 200, None, "delivered"),
    ]
    attempts = attempts_frame(rows)
    expected = pd.DataFrame(
        {
            "partner_name": ["Dead"],
            "issue": ["disabled"],
            "count": [2],
            "detail": [
                "disabled 2024-03-06 09:15 UTC after failing without a break; fix or update its URL, then resume"
            ],
            "command": ["python -m service partners resume p_dead"],
        }
    )
    assert_frame_equal(deliveries.action_items(partners, log, attempts), expected)


def test_latency_bands_stop_at_ten_the_last_open_ended() -> None:
    """An attempt that ran to the 15 s timeout adds no 150 empty bands of 100 ms: the tenth band
    holds everything from 900 ms on."""
    frame = pd.DataFrame({"partner_name": ["Acme"] * 4, "duration_ms": [20, 150, 950, 15_000]})
    bands = deliveries.latency_bands(frame, step_ms=100)
    assert list(bands.columns) == [
        "partner_name",
        "attempts",
        *(f"{low}-{low + 99} ms" for low in range(0, 900, 100)),
        "≥ 900 ms",
    ]
    assert bands.iloc[0][["0-99 ms", "100-199 ms", "≥ 900 ms"]].tolist() == [0.25, 0.25, 0.5]
    assert len(bands.columns) == 2 + deliveries.MAX_BANDS


def test_an_empty_log_has_no_newest_record_and_every_window_is_empty() -> None:
    """A new database: no moment to end the windows at, and every window (all of history too)
    holds no attempt, where the first cell of the delivery notebook stopped."""
    def empty(columns: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})

    log = deliveries.with_batches(empty(load.DELIVERY_COLUMNS), empty(load.BATCH_COLUMNS))
    attempts = empty(load.ATTEMPT_COLUMNS)
    now = deliveries.data_now(log, attempts)
    assert now is None
    windows = deliveries.success_over_windows(attempts, now, by=None)
    assert windows.filter(like="attempts").iloc[0].tolist() == [0, 0, 0]
    assert deliveries.events_and_requests(log, by=None).iloc[0].tolist() == [0, 0, 0, 0, 0]


def test_action_items_when_all_is_well() -> None:
    """Nothing to act on is an empty table with the same columns."""
    partners, log, attempts = operator_frames()
    result = deliveries.action_items(partners.iloc[2:], log, attempts)
    assert result.empty
    assert list(result.columns) == list(deliveries.ACTION_COLUMNS)


def test_the_action_report_says_when_there_is_nothing_to_act_on() -> None:
    """An empty action table is reported as one sentence naming the threshold, never as silence."""
    empty = pd.DataFrame(columns=list(deliveries.ACTION_COLUMNS))
    assert deliveries.action_report(empty) == (
        "Nothing to act on: no partner is paused or disabled, no delivery has failed, and every partner's "
        "attempt success rate is at least 95%."
    )
    assert deliveries.action_report(empty, min_success_rate=0.9).endswith("at least 90%.")


def test_the_action_report_lists_each_command() -> None:
    """Each action item is a comment naming the partner and issue, then the command to run."""
    report = deliveries.action_report(deliveries.action_items(*operator_frames()))
    assert report.splitlines() == [
        "# Gone: paused",
        "python -m service partners resume p_gone",
        "# Flaky: failed",
        "python -m service partners retry p_flaky",
        "# Flaky: unreliable",
        "python -m service partners test p_flaky",
    ]


def test_no_partners_means_nothing_to_act_on() -> None:
    """Empty frames (a fresh database) give an empty table and the nothing-to-act-on sentence."""
    partners, log, attempts = (frame.iloc[:0] for frame in operator_frames())
    actions = deliveries.action_items(partners, log, attempts)
    assert actions.empty and list(actions.columns) == list(deliveries.ACTION_COLUMNS)
    assert deliveries.action_report(actions).startswith("Nothing to act on")


def pruned_log() -> tuple[pd.DataFrame, pd.DataFrame]:
    """What retention leaves of a partner that failed in March and has answered since: March's
    delivered deliveries are gone with their attempts, its delivery still waiting is kept with its
    two failed attempts, and April's deliveries are all here."""
    log = pd.DataFrame(
        {
            "id": ["waits", "a1", "a2"],
            "partner_name": ["Acme"] * 3,
            "status": ["pending", "delivered", "failed"],
            "updated_at": utc("2024-03-01T10:05:00", "2024-04-10T09:00:00", "2024-04-11T12:00:00"),
        }
    )
    attempts = pd.DataFrame(
        {
            "delivery_id": ["waits", "waits", "a1", "a2"],
            "partner_name": ["Acme"] * 4,
            "started_at": utc(
                "2024-03-01T10:00:00", "2024-03-01T10:05:00", "2024-04-10T09:00:00", "2024-04-11T12:00:00"
            ),
            "outcome": ["retry", "retry", "delivered", "failed"],
        }
    )
    return log, attempts


def test_figures_read_only_the_part_of_the_log_retention_left_whole() -> None:
    """The log is whole from the oldest settled delivery's last change: the waiting delivery's
    March failures are set aside, and the rate is April's 50%, not a 25% leaning on what pruning
    happened to keep."""
    log, attempts = pruned_log()
    since = deliveries.complete_since(log)
    assert since == pd.Timestamp("2024-04-10T09:00:00", tz="UTC")
    whole = deliveries.complete(attempts, since)
    assert whole["delivery_id"].tolist() == ["a1", "a2"]
    assert deliveries.success_rate(whole, by=None)["success_rate"].tolist() == [0.5]
    assert deliveries.success_rate(attempts, by=None)["success_rate"].tolist() == [0.25]


def test_coverage_says_what_the_log_covers_and_what_is_set_aside() -> None:
    """One paragraph: the span of the attempts, what retention does, and what the figures read."""
    log, attempts = pruned_log()
    assert deliveries.coverage(log, attempts) == (
        "4 attempts logged from 2024-03-01 10:00 to 2024-04-11 12:00 UTC. Retention "
        f"(SERVICE_RETENTION_DAYS, {deliveries.RETENTION_DEFAULT_DAYS} days unless set) deletes settled deliveries with their attempts "
        "and keeps waiting ones, failed attempts and all, however old: every settled delivery last "
        "changed since 2024-04-10 09:00 UTC is still here, so figures over attempts read those from "
        "then on and set aside the 2 made earlier, which may be only the failures retention keeps."
    )
    whole = log["id"].ne("waits")
    assert deliveries.coverage(log[whole], attempts[attempts["delivery_id"].ne("waits")]).endswith(
        "is still here, and so is every attempt; nothing is set aside."
    )


def test_a_log_with_nothing_settled_says_its_figures_may_lean_towards_failure() -> None:
    """Only waiting deliveries left (or none settled yet): nothing to tell the whole part by, so
    every attempt is read and the paragraph says what that means; an empty log says it is empty."""
    log, attempts = pruned_log()
    waiting, tried = log.iloc[:1], attempts.iloc[:2]
    assert deliveries.complete_since(waiting) is None
    assert deliveries.complete(tried, None) is tried
    assert deliveries.coverage(waiting, tried).endswith(
        "no delivery in the log has settled, so its attempts may be only those of deliveries still "
        "waiting, which lean towards failure."
    )
    assert deliveries.coverage(log.iloc[:0], attempts.iloc[:0]) == "No attempt is logged yet."
