"""Delivery analyses on small hand-made frames with answers worked out by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from analytics import deliveries
from analytics.deliveries import By

UTC_TIME = "datetime64[ns, UTC]"


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
    ("by", "keys", "counts", "delivered", "rate"),
    [
        (
            ("partner_name", "event"),
            {
                "partner_name": ["Acme", "Acme", "Beta"],
                "event": ["order.created", "waitlist.joined", "order.created"],
            },
            [2, 1, 2],
            [1, 1, 1],
            [0.5, 1.0, 0.5],
        ),
        ("partner_name", {"partner_name": ["Acme", "Beta"]}, [3, 2], [2, 1], [0.6667, 0.5]),
        (None, {}, [5], [3], [0.6]),
        ((), {}, [5], [3], [0.6]),
    ],
)
def test_success_rate_of_deliveries(
    by: By, keys: dict[str, list[str]], counts: list[int], delivered: list[int], rate: list[float]
) -> None:
    """Delivered share of deliveries per group; pending ones count as not delivered."""
    expected = pd.DataFrame({**keys, "deliveries": counts, "delivered": delivered, "rate": rate})
    assert_frame_equal(deliveries.success_rate(delivery_frame(), by=by), expected)


def test_success_rate_of_attempts() -> None:
    """From attempts, a delivery counts once, delivered if any attempt delivered."""
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Acme", "Beta"],
            "event": ["order.created", "waitlist.joined", "order.created"],
            "deliveries": [2, 1, 1],
            "delivered": [1, 1, 1],
            "rate": [0.5, 1.0, 1.0],
        }
    )
    assert_frame_equal(deliveries.success_rate(attempt_frame()), expected)


def test_success_rate_keeps_a_missing_partner() -> None:
    """A delivery whose partner row is gone is its own group, not silently dropped."""
    frame = delivery_frame().astype({"partner_name": "str"})
    frame.loc[4, "partner_name"] = None
    expected = pd.DataFrame(
        {
            "partner_name": ["Acme", "Beta", None],
            "deliveries": [3, 1, 1],
            "delivered": [2, 1, 0],
            "rate": [0.6667, 1.0, 0.0],
        }
    ).astype({"partner_name": "str"})
    assert_frame_equal(deliveries.success_rate(frame, by="partner_name"), expected)


def test_success_rate_refuses_other_frames() -> None:
    """A frame with neither status nor outcome is a mistake worth naming."""
    with pytest.raises(ValueError, match="deliveries frame"):
        deliveries.success_rate(pd.DataFrame({"partner_name": ["Acme"]}))


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


def test_failure_reasons() -> None:
    """Failed attempts by class and code, most first, ties by class, no answer as NA."""
    expected = pd.DataFrame(
        {
            "error_class": ["http_500", "http_503", "timeout", "connect"],
            "status_code": pd.array([500, 503, None, None], dtype="Int64"),
            "attempts": [2, 2, 2, 1],
            "share": [0.2857, 0.2857, 0.2857, 0.1429],
        }
    )
    assert_frame_equal(deliveries.failure_reasons(attempt_frame()), expected)


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
            "total": [3, 2],
        }
    )
    assert_frame_equal(deliveries.states(delivery_frame()), expected)


def test_states_overall() -> None:
    """Without grouping, one row for all deliveries."""
    expected = pd.DataFrame(
        {"pending": [1], "delivering": [0], "delivered": [3], "failed": [1], "total": [5]}
    )
    assert_frame_equal(deliveries.states(delivery_frame(), by=None), expected)


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
    attempts = pd.DataFrame(
        rows, columns=["delivery_id", "partner_id", "status_code", "error_class", "outcome"]
    ).astype({"status_code": "Int64"})
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
                "25% of attempts succeeded; errors: http_500: 2, connect: 1",
            ],
            "command": [
                "python -m service partners resume p_gone",
                "python -m service partners retry p_flaky",
                "python -m service partners test p_flaky",
            ],
        }
    )
    assert_frame_equal(deliveries.action_items(*operator_frames()), expected)


def test_action_items_when_all_is_well() -> None:
    """Nothing to act on is an empty table with the same columns."""
    partners, log, attempts = operator_frames()
    result = deliveries.action_items(partners.iloc[2:], log, attempts)
    assert result.empty
    assert list(result.columns) == list(deliveries.ACTION_COLUMNS)
