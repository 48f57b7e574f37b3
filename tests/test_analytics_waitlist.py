"""Waitlist analyses on a small hand-made registrations frame with answers worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal, assert_series_equal

from analytics import waitlist

UTC_TIME = "datetime64[us, UTC]"


def utc(*stamps: str) -> pd.Series:
    return pd.Series(pd.to_datetime(list(stamps), utc=True)).astype(UTC_TIME)


def registrations() -> pd.DataFrame:
    # ann registers under all three intents; bob, cat and dan under one each.
    return pd.DataFrame(
        {
            "email": ["a***@x.com", "a***@x.com", "b***@x.com", "c***@x.com", "a***@x.com", "d***@x.com"],
            "email_hash": ["h_ann", "h_ann", "h_bob", "h_cat", "h_ann", "h_dan"],
            "intent": ["claim", "member", "claim", "arcade", "arcade", "claim"],
            "project": ["Moon DAO", " moon  dao ", "Zeta", "alpha", None, "Zeta"],
            "message": ["gm", None, "  ", "I want in early", "", "hello there"],
            "created_at": utc(
                "2024-03-01T09:00",
                "2024-03-01T18:00",
                "2024-03-03T12:00",
                "2024-03-03T13:00",
                "2024-03-04T08:00",
                "2024-03-04T09:00",
            ),
        }
    )


def test_intent_mix() -> None:
    """Counts and shares per intent, sorted by intent."""
    expected = pd.DataFrame(
        {"intent": ["arcade", "claim", "member"], "count": [2, 3, 1], "share": [0.3333, 0.5, 0.1667]}
    )
    assert_frame_equal(waitlist.intent_mix(registrations()), expected)


def test_intent_mix_of_nothing_lists_every_intent() -> None:
    """With no registrations every intent is still present, with zero count and share."""
    expected = pd.DataFrame(
        {"intent": ["arcade", "claim", "member"], "count": [0, 0, 0], "share": [0.0, 0.0, 0.0]}
    )
    assert_frame_equal(waitlist.intent_mix(registrations().iloc[:0]), expected)


def test_intent_mix_keeps_an_unknown_intent() -> None:
    """An intent outside the known three shows up rather than being dropped."""
    frame = pd.DataFrame({"intent": ["claim", "beta"]})
    expected = pd.DataFrame(
        {
            "intent": ["arcade", "beta", "claim", "member"],
            "count": [0, 1, 1, 0],
            "share": [0.0, 0.5, 0.5, 0.0],
        }
    )
    assert_frame_equal(waitlist.intent_mix(frame), expected)


@pytest.mark.parametrize(
    ("freq", "periods", "arcade", "claim", "member"),
    [
        (
            "D",
            ("2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"),
            [0, 0, 1, 1],
            [1, 0, 1, 1],
            [1, 0, 0, 0],
        ),
        ("MS", ("2024-03-01",), [2], [3], [1]),
    ],
)
def test_registrations_over_time(
    freq: str, periods: tuple[str, ...], arcade: list[int], claim: list[int], member: list[int]
) -> None:
    """Counts per period and intent, with empty periods filled with zeros."""
    expected = pd.DataFrame({"period": utc(*periods), "arcade": arcade, "claim": claim, "member": member})
    result = waitlist.registrations_over_time(registrations(), freq=freq)
    assert_frame_equal(result, expected, check_freq=False)


def test_registrations_over_time_of_nothing() -> None:
    """No registrations give no periods but still one column per intent."""
    result = waitlist.registrations_over_time(registrations().iloc[:0])
    assert list(result.columns) == ["period", "arcade", "claim", "member"]
    assert result.empty


def test_an_intent_stored_as_period_keeps_its_count_beside_the_period_column() -> None:
    """Unknown intents show, not vanish; one stored as "period" (an earlier release, a hand in the
    database) took the period column's name and stopped the table."""
    frame = registrations().assign(intent=["claim", "period", "claim", "arcade", "period", "claim"])
    result = waitlist.registrations_over_time(frame, freq="D")
    assert list(result.columns) == ["period", "arcade", "claim", "member", "period (intent)"]
    assert result["period (intent)"].sum() == 2
    assert result["period"].dtype == UTC_TIME


@pytest.mark.parametrize("identity", ["email_hash", "email_key"])
def test_repeat_registrations(identity: str) -> None:
    """Identities counted by how many intents they registered under, 1 to 3 always present."""
    frame = registrations().rename(columns={"email_hash": identity})
    expected = pd.DataFrame({"intents": [1, 2, 3], "identities": [3, 0, 1], "share": [0.75, 0.0, 0.25]})
    assert_frame_equal(waitlist.repeat_registrations(frame), expected)


def test_repeat_registrations_refuses_masked_emails() -> None:
    """Masked addresses collide, so without a hash or key the function refuses to guess."""
    with pytest.raises(ValueError, match="identity column"):
        waitlist.repeat_registrations(registrations().drop(columns="email_hash"))


@pytest.mark.parametrize(
    ("n", "projects", "counts"),
    [
        (10, ["Moon DAO", "Zeta", "alpha"], [2, 2, 1]),
        (2, ["Moon DAO", "Zeta"], [2, 2]),
        (1, ["Moon DAO"], [2]),
        (0, [], []),
    ],
)
def test_top_projects(n: int, projects: list[str], counts: list[int]) -> None:
    """Names counted alike whatever their case and spacing, shown as written, most first, ties alphabetical."""
    expected = pd.DataFrame({"project": projects, "count": counts}).astype(
        {"project": "str", "count": "int64"}
    )
    assert_frame_equal(waitlist.top_projects(registrations(), n=n), expected)


def test_top_projects_counts_names_that_look_alike_as_one() -> None:
    """A zero-width space or joiner, and a combining accent against a precomposed letter, do not
    make a name of their own: each counts with the name it looks like."""
    names = ["Moonfrog", "Moonfrog", "Moon\u200bfrog", "Moonfrog\u200d", "Caf\u00e9", "Caf\u00e9", "Cafe\u0301", "Zeta"]
    frame = pd.DataFrame({"project": names})
    top = waitlist.top_projects(frame)
    assert top.to_dict("list") == {"project": ["Moonfrog", "Caf\u00e9", "Zeta"], "count": [4, 3, 1]}


def test_top_projects_refuses_negative_n() -> None:
    """A negative n is a mistake, not a request for everything but the last."""
    with pytest.raises(ValueError, match="n must be"):
        waitlist.top_projects(registrations(), n=-1)


def test_message_lengths() -> None:
    """Summary over non-blank messages, and one length per message for a histogram."""
    result = waitlist.message_lengths(registrations())
    expected = pd.DataFrame(
        {
            "count": [6],
            "messages": [3],
            "with_message": [0.5],
            "mean": [9.3333],
            "p50": [11.0],
            "p90": [14.2],
            "max": [15.0],
        }
    )
    assert_frame_equal(result.summary, expected)
    assert_series_equal(result.lengths, pd.Series([2, 11, 15], name="length"))


def test_message_lengths_of_nothing() -> None:
    """No registrations: zero counts and NaN statistics, never a division error."""
    result = waitlist.message_lengths(registrations().iloc[:0])
    nan = float("nan")
    expected = pd.DataFrame(
        {
            "count": [0],
            "messages": [0],
            "with_message": [0.0],
            "mean": [nan],
            "p50": [nan],
            "p90": [nan],
            "max": [nan],
        }
    )
    assert_frame_equal(result.summary, expected)
    assert result.lengths.empty


def test_top_projects_show_the_most_common_spelling() -> None:
    """A project is shown as most registrants wrote it, counted with every other spelling of it."""
    frame = pd.DataFrame({"project": ["moonfrog", "MoonFrog", "MoonFrog", " MOONFROG ", "Zeta"]})
    expected = pd.DataFrame({"project": ["MoonFrog", "Zeta"], "count": [4, 1]}).astype({"project": "str"})
    assert_frame_equal(waitlist.top_projects(frame), expected)


def test_weeks_are_labelled_by_the_monday_they_start() -> None:
    """Weekly rows start on Monday (UTC), every week in range present, a Sunday in the week it ends."""
    result = waitlist.registrations_over_time(registrations(), freq="W")
    expected = pd.DataFrame(
        {"period": utc("2024-02-26", "2024-03-04"), "arcade": [1, 1], "claim": [2, 1], "member": [1, 0]}
    )
    assert_frame_equal(result, expected, check_freq=False)


@pytest.mark.parametrize(
    ("span_days", "step"), [(0, "D"), (1, "D"), (62, "D"), (63, "W"), (400, "W")]
)
def test_the_time_step_fits_the_span(span_days: int, step: str) -> None:
    """Days for up to two months of data, weeks beyond: a day of data is one row of a day."""
    created = pd.Series(utc("2024-03-01T09:00")).repeat(2).reset_index(drop=True)
    created.iloc[1] += pd.Timedelta(days=span_days)
    assert waitlist.time_step(created) == step
    frame = pd.DataFrame({"intent": ["claim", "member"], "created_at": created})
    periods = waitlist.registrations_over_time(frame)["period"]
    assert periods.iloc[0] <= created.iloc[0] < periods.iloc[0] + pd.Timedelta(days=1 if step == "D" else 7)


def test_one_day_of_registrations_is_one_row() -> None:
    """Three registrations on one day: one daily row counting all three."""
    frame = pd.DataFrame(
        {
            "intent": ["claim", "claim", "member"],
            "created_at": utc("2026-06-29T09:00", "2026-06-29T12:30", "2026-06-29T23:59"),
        }
    )
    result = waitlist.registrations_over_time(frame)
    expected = pd.DataFrame({"period": utc("2026-06-29"), "arcade": [0], "claim": [2], "member": [1]})
    assert_frame_equal(result, expected, check_freq=False)
