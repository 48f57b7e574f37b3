"""The waitlist in numbers: pure functions on the frame ``load.load_registrations`` returns."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np
import pandas as pd

from service.db.registrations import INTENTS as ACCEPTED_INTENTS

# Every intent the service accepts, so an intent nobody picked yet still shows, as zero; sorted
# because every table here is.
INTENTS = tuple(sorted(ACCEPTED_INTENTS))
DECIMALS = 4  # enough to tell shares apart, few enough that notebook output never jitters
PERIOD = "period"  # the time column of ``registrations_over_time``
FREQ = "freq"  # the ``attrs`` key where ``registrations_over_time`` records its step, for charts
# Masked addresses collide ("a***@example.com"), so identity needs one of these, best first.
IDENTITY_COLUMNS = ("email_hash", "email_key")
# Up to two months, one point a day still reads as a line; a longer span is read in weeks.
DAILY_SPAN = pd.Timedelta(days=62)
DAY, WEEK = "D", "W"
WEEK_DAYS = 7  # weeks start on Monday (ISO 8601) and are labelled by it, UTC


def time_step(created_at: pd.Series) -> str:
    """``"D"`` (days) for data spanning up to ``DAILY_SPAN``, ``"W"`` (weeks) beyond."""
    if created_at.empty or created_at.max() - created_at.min() <= DAILY_SPAN:
        return DAY
    return WEEK


@dataclass(frozen=True, slots=True)
class MessageLengths:
    """``summary``: one row of statistics; ``lengths``: one value per message, for a histogram."""

    summary: pd.DataFrame
    lengths: pd.Series


def intent_mix(df: pd.DataFrame) -> pd.DataFrame:
    """Columns ``intent, count, share``, one row per intent (every known one), sorted by intent."""
    counts = df["intent"].value_counts()
    intents = _intents(df)
    counts = counts.reindex(intents, fill_value=0).astype("int64")
    return pd.DataFrame(
        {"intent": intents, "count": counts.to_numpy(), "share": _share(counts).to_numpy()}
    ).astype({"intent": "str"})


def registrations_over_time(df: pd.DataFrame, freq: str | None = None) -> pd.DataFrame:
    """Columns ``period`` then one count column per intent, every period in range, zeros filled
    (an intent stored as ``period`` is counted as ``period (intent)``).

    Each ``period`` is labelled by its start: ``"D"`` the day, ``"W"`` the Monday the week starts
    on (UTC), ``"MS"`` the month's first day. Without ``freq``, ``time_step`` picks days or weeks
    from the span of the data, so a day of data is one row, not a week's. The step taken is kept in
    ``attrs[FREQ]``, so a chart labels its periods by it.
    """
    step = freq or time_step(df["created_at"])
    intents = _intents(df)
    onehot = pd.get_dummies(df["intent"]).reindex(columns=intents, fill_value=False)
    onehot = onehot.astype("int64").set_axis(pd.DatetimeIndex(df["created_at"]), axis="index")
    if step == WEEK:
        index = onehot.index
        starts = index.normalize() - pd.to_timedelta(index.day_of_week, unit="D")
        counts = onehot.groupby(starts).sum()
        if len(counts):
            every = pd.date_range(counts.index.min(), counts.index.max(), freq=f"{WEEK_DAYS}D")
            counts = counts.reindex(every, fill_value=0)
    else:
        counts = onehot.resample(step).sum()
    # An intent stored as "period" (an earlier release, or a hand in the database) keeps its
    # count, under a name that cannot be taken for the period column.
    counts = counts.rename(columns={PERIOD: f"{PERIOD} (intent)"})
    counts.index.name = PERIOD
    counts.columns.name = None
    out = counts.reset_index()
    out.attrs[FREQ] = step
    return out


def repeat_registrations(df: pd.DataFrame) -> pd.DataFrame:
    """Columns ``intents, identities, share``: how many addresses registered under 1, 2, 3 intents.

    Rows with ``intents > 1`` are the repeats; the ``1`` row is there so shares have their base.
    Identity comes from ``email_hash`` (or ``email_key``); the masked ``email`` is refused.
    """
    key = next((column for column in IDENTITY_COLUMNS if column in df.columns), None)
    if key is None:
        raise ValueError(f"need an identity column, one of {IDENTITY_COLUMNS}")
    # Distinct (identity, intent) pairs, counted per identity, on integer codes: a groupby's
    # nunique over a million distinct string keys takes seconds, this a fraction of one.
    identities, _ = pd.factorize(df[key])
    intents, known = pd.factorize(df["intent"])
    both = (identities >= 0) & (intents >= 0)
    pairs = np.unique(identities[both].astype("int64") * max(len(known), 1) + intents[both])
    per_identity = np.bincount(pairs // max(len(known), 1))
    counts = pd.Series(per_identity[per_identity > 0]).value_counts()
    most = max(len(INTENTS), int(counts.index.max()) if len(counts) else 0)
    counts = counts.reindex(range(1, most + 1), fill_value=0).astype("int64")
    return pd.DataFrame(
        {
            "intents": counts.index.to_numpy(dtype="int64"),
            "identities": counts.to_numpy(),
            "share": _share(counts).to_numpy(),
        }
    )


def _project_key(spelling: str) -> str:
    """What two spellings of one project name share: NFKC, no format characters, case folded."""
    visible = "".join(char for char in spelling if unicodedata.category(char) != "Cf")
    return unicodedata.normalize("NFKC", visible).casefold()


def top_projects(df: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """Columns ``project, count``: the ``n`` most named projects, most first, ties alphabetical.

    Names are compared trimmed, with inner whitespace collapsed and case folded, so "Moon  DAO"
    and "moon dao" count as one, and as Unicode NFKC without its invisible format characters, so
    "Café" typed precomposed or with a combining accent, and "Moon\u200bDAO" (a zero-width space,
    which the intake accepts), count with the names they look like; blank names are not projects.
    Each is shown as registrants wrote it: its most common spelling (spaces tidied), the first in
    sort order among equally common ones.
    """
    if n < 0:
        raise ValueError("n must be zero or more")
    # Count the raw spellings first (one hash pass), then normalise only the distinct ones.
    raw = df["project"].value_counts(dropna=True)
    spelled = raw.index.map(lambda name: " ".join(str(name).split()))
    spellings = raw.groupby(spelled.to_numpy(dtype="object"), sort=False).sum()
    spellings = spellings[spellings.index != ""]
    table = pd.DataFrame(
        {"spelling": spellings.index.astype("str"), "count": spellings.to_numpy(dtype="int64")}
    )
    table["key"] = table["spelling"].map(_project_key)
    table = table.sort_values(["key", "count", "spelling"], ascending=[True, False, True], kind="stable")
    grouped = table.groupby("key", sort=False)
    out = pd.DataFrame(
        {
            "project": grouped["spelling"].first().astype("str"),
            "count": grouped["count"].sum().astype("int64"),
        }
    ).reset_index()
    out = out.sort_values(["count", "key"], ascending=[False, True], kind="stable")
    return out[["project", "count"]].head(n).reset_index(drop=True)


def message_lengths(df: pd.DataFrame) -> MessageLengths:
    """Message length in characters (trimmed); a blank or missing message is no message.

    Lengths are the messages as written: ``message_length``, which ``load`` measures before it masks
    the addresses in ``message`` (a masked address is a character longer or many shorter). A frame
    without that column has its ``message`` measured as it is.

    ``summary`` columns: ``count`` (registrations), ``messages``, ``with_message`` (share),
    ``mean, p50, p90, max`` over the messages (NaN when there are none).
    """
    if "message_length" in df.columns:
        measured = df["message_length"].dropna()
    else:
        measured = df["message"].dropna().map(lambda text: len(str(text).strip()))
    lengths = measured[measured > 0].astype("int64")
    lengths = lengths.sort_values(kind="stable").reset_index(drop=True).rename("length")
    count = len(df)
    summary = pd.DataFrame(
        {
            "count": [count],
            "messages": [len(lengths)],
            "with_message": [round(len(lengths) / count, DECIMALS) if count else 0.0],
            "mean": [lengths.mean()],
            "p50": [lengths.quantile(0.5)],
            "p90": [lengths.quantile(0.9)],
            "max": [float(lengths.max()) if len(lengths) else float("nan")],
        }
    ).astype({"count": "int64", "messages": "int64", "mean": "float64"})
    return MessageLengths(summary=summary.round(DECIMALS), lengths=lengths)


def _intents(df: pd.DataFrame) -> list[str]:
    # Known intents always, plus any in the data, so an unexpected value shows, not vanishes.
    return sorted(set(INTENTS) | set(df["intent"].dropna().astype(str)))


def _share(counts: pd.Series) -> pd.Series:
    total = counts.sum()
    if total == 0:
        return counts.astype("float64")  # all zero: a share of nothing is 0, not NaN
    return (counts / total).round(DECIMALS)
