"""Webhook delivery health: pure functions on ``load_deliveries`` / ``load_attempts`` frames.

``by`` names the grouping columns (a name, several, or ``None``/``()`` for one overall row); groups
come out sorted, and a missing key (a partner row since deleted) is its own group, not dropped.

Success has one definition here, used by every table, chart and action item: the **attempt
success rate**, the share of delivery attempts the partner answered with a 2xx. Every attempt
counts, retries included, so an endpoint that fails often shows it even when retries end up
delivering everything; a partner below ``MIN_SUCCESS_RATE`` is one to talk to. Where a delivery
stands (pending, delivered, failed) is a state (``states``), not a rate.

Retention (``SERVICE_RETENTION_DAYS``) deletes settled deliveries with their attempts and keeps
waiting ones, failed attempts and all, however old: before ``complete_since`` the log may hold
only those, and a rate read there leans towards failure (``complete``, ``coverage``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

from service.settings import Settings
from service.states import SETTLED, DeliveryStatus

DECIMALS = 4  # enough to tell rates apart, few enough that notebook output never jitters
MAX_BANDS = 10  # latency bands a table and its chart show at most (``latency_bands``)
PERCENTILES = (50, 90, 99)  # the median, the usual tail, the rare tail
DELIVERED = "delivered"  # the outcome of an attempt answered 2xx, and the state it leaves
BATCHING = str(DeliveryStatus.BATCHING)  # an event waiting for its batch to form
CANCELLED = str(DeliveryStatus.CANCELLED)  # its partner was removed
SUCCESS_RATE = "attempt success rate"  # the name of the one definition of success (see above)
# An endpoint that fails more than one attempt in twenty is worth a word with its owner, even when
# retries hide it: each failure delays a delivery by a retry delay at least.
MIN_SUCCESS_RATE = 0.95
STATUSES = tuple(str(status) for status in DeliveryStatus)  # every state, in the service's order
# Not settled: waiting to be sent, being sent, or waiting for (or inside) a batch.
WAITING = tuple(status for status in STATUSES if status not in SETTLED)
RETENTION_SETTING = "SERVICE_RETENTION_DAYS"
RETENTION_DEFAULT_DAYS: int = Settings.model_fields["retention_days"].default

By = str | Sequence[str] | None
# The recent windows verdicts are read over, beside all of history: a partner that failed last
# week and has been healthy since is judged by how it is doing now.
RECENT_WINDOWS: tuple[tuple[str, pd.Timedelta], ...] = (
    ("last 24 h", pd.Timedelta(hours=24)),
    ("last 7 days", pd.Timedelta(days=7)),
)
ALL_HISTORY = "all history"


def with_batches(deliveries: pd.DataFrame, batches: pd.DataFrame) -> pd.DataFrame:
    """``deliveries`` (``load_deliveries``) with ``batch_id`` and ``is_batch`` from
    ``load_delivery_batches``; a delivery it does not list is an event sent alone."""
    out = deliveries.merge(batches, on="id", how="left")
    out["is_batch"] = out["is_batch"].astype("boolean").fillna(False).astype("bool")
    return out


def events_only(deliveries: pd.DataFrame) -> pd.DataFrame:
    """One row per event delivered to a partner: batch requests left out, their members kept."""
    if "is_batch" not in deliveries.columns:
        return deliveries
    return deliveries[~deliveries["is_batch"]]


def own_requests(deliveries: pd.DataFrame) -> pd.Series:
    """Which deliveries are requests: sent, or to be sent, as a signed POST of their own.

    That is every delivery but a batch's member (its batch's POST carries it; its attempts are the
    batch's), an event still ``batching`` (no POST of its own yet: it goes in the batch that forms,
    or alone if its partner stops batching its kind, and counts then), and one ``cancelled`` before
    any attempt (its partner was removed: never sent). A delivery cancelled after an attempt was
    sent, and counts. A frame without ``batch_id`` (not given ``with_batches``) has no members.
    """
    status = deliveries["status"]
    never_sent = status.eq(CANCELLED) & deliveries["attempts"].eq(0)
    mine = status.ne(BATCHING) & ~never_sent
    if "batch_id" in deliveries.columns:
        mine &= deliveries["batch_id"].isna()
    return mine


def requests_only(deliveries: pd.DataFrame) -> pd.DataFrame:
    """One row per signed request (``own_requests``): events sent alone and batch requests."""
    return deliveries[own_requests(deliveries)]


def events_and_requests(deliveries: pd.DataFrame, by: By = "partner_name") -> pd.DataFrame:
    """Columns ``*by, events, events_delivered, requests, batch_requests, requests_delivered``.

    An event is one event for one partner; a request is one signed POST, sent or to be sent: an
    event sent alone, or a batch carrying several events (``own_requests``: not an event waiting for
    its batch, nor one cancelled unsent). Counting both as "deliveries" would count a batched event
    twice. Takes ``with_batches(load_deliveries(), load_delivery_batches())``. Without ``by``, one
    row (zeros for an empty log).
    """
    if "is_batch" not in deliveries.columns:
        raise ValueError("events and requests are told apart by with_batches (batch_id, is_batch)")
    keys = _keys(by)
    delivered = deliveries["status"].eq(DELIVERED)
    is_event = ~deliveries["is_batch"]
    is_request = own_requests(deliveries)
    counted = {
        "events": is_event,
        "events_delivered": is_event & delivered,
        "requests": is_request,
        "batch_requests": deliveries["is_batch"] & is_request,
        "requests_delivered": is_request & delivered,
    }
    sums = _groups(deliveries.assign(**counted), keys)[list(counted)].sum()
    if not keys and sums.empty:  # the overall answer has its one row, of zeros on an empty log
        sums = pd.DataFrame(0, index=[0], columns=list(counted))
    return sums.astype("int64").reset_index(drop=not keys)


def success_over_windows(
    attempts: pd.DataFrame,
    now: pd.Timestamp | None,
    by: By = "partner_name",
    windows: Sequence[tuple[str, pd.Timedelta]] = RECENT_WINDOWS,
) -> pd.DataFrame:
    """Columns ``*by``, then for each window (ending at ``now``) and for all history
    ``<window> attempts`` and ``<window> rate``: the attempt success rate over that window, NaN
    where the group made no attempt in it. Groups with any attempt at all have a row. Without
    ``now`` (``data_now`` of an empty log) every window is all of history."""
    keys = _keys(by)
    whole = success_rate(attempts, by=keys or None)
    out = whole[keys].copy() if keys else pd.DataFrame(index=[0])
    for label, length in [*windows, (ALL_HISTORY, None)]:
        if length is None or now is None:
            inside = attempts
        else:
            inside = attempts[attempts["started_at"].gt(now - length) & attempts["started_at"].le(now)]
        rates = success_rate(inside, by=keys or None)
        if keys:
            rates = whole[keys].merge(rates, on=keys, how="left")
        elif rates.empty:
            rates = pd.DataFrame({"attempts": [0], "success_rate": [np.nan]})
        out[f"{label} attempts"] = rates["attempts"].fillna(0).astype("int64").to_numpy()
        out[f"{label} rate"] = rates["success_rate"].astype("float64").to_numpy()
    return out.reset_index(drop=True)


def data_now(deliveries: pd.DataFrame, attempts: pd.DataFrame) -> pd.Timestamp | None:
    """The newest moment the log records: where the recent windows of a log end; None for an
    empty log (a new database), whose every window is all of its history: nothing."""
    moments = [deliveries["created_at"].max(), attempts["started_at"].max()]
    known = [moment for moment in moments if not pd.isna(moment)]
    return max(known) if known else None


def complete_since(deliveries: pd.DataFrame) -> pd.Timestamp | None:
    """From when the log holds every attempt: the oldest last change (``updated_at``) of a settled
    delivery still in it; None when no delivery in it has settled.

    Retention deletes a settled delivery, with its attempts, once its last change is older than the
    cut-off, and keeps every waiting one whole. Every settled delivery this old is still here, so
    the cut-off has not passed it, nor any attempt since: each was made at or before its own
    delivery's last change. Before it the log may hold only the failed attempts of deliveries still
    waiting.
    """
    settled = deliveries.loc[deliveries["status"].isin([str(status) for status in SETTLED]), "updated_at"]
    oldest = settled.min()
    return None if pd.isna(oldest) else oldest


def complete(attempts: pd.DataFrame, since: pd.Timestamp | None) -> pd.DataFrame:
    """The attempts started at or after ``since`` (``complete_since``): the part of the log no
    pruning can have thinned. ``since`` None keeps them all."""
    if since is None:
        return attempts
    return attempts[attempts["started_at"].ge(since)]


def coverage(deliveries: pd.DataFrame, attempts: pd.DataFrame) -> str:
    """One paragraph: what span of time the log's attempts cover, what retention may have taken
    from it, and which attempts figures read (``complete``) and which they set aside."""
    if attempts.empty:
        return "No attempt is logged yet."
    since = complete_since(deliveries)
    first, last = attempts["started_at"].min(), attempts["started_at"].max()
    logged = f"{len(attempts):,} attempts logged from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC."
    retention = (
        f"Retention ({RETENTION_SETTING}, {RETENTION_DEFAULT_DAYS} days unless set) deletes settled "
        "deliveries with their attempts and keeps waiting ones, failed attempts and all, however old"
    )
    if since is None:
        return (
            f"{logged} {retention}; no delivery in the log has settled, so its attempts may be only "
            "those of deliveries still waiting, which lean towards failure."
        )
    before = int(attempts["started_at"].lt(since).sum())
    read = f"every settled delivery last changed since {since:%Y-%m-%d %H:%M} UTC is still here"
    if not before:
        return f"{logged} {retention}: {read}, and so is every attempt; nothing is set aside."
    return (
        f"{logged} {retention}: {read}, so figures over attempts read those from then on and set "
        f"aside the {before:,} made earlier, which may be only the failures retention keeps."
    )


def states(frame: pd.DataFrame, by: By = "partner_name") -> pd.DataFrame:
    """Columns ``*by``, one per state of ``STATUSES`` (``pending, delivering, delivered, failed,
    batching, batched, cancelled``), then any other status found in ``frame`` (sorted), then
    ``total``: deliveries per state.

    Every state has its column, zeros included, so a state nobody is in still shows; a status the
    service does not define (a newer release, a hand in the database) shows too, never vanishes.
    """
    keys = _keys(by)
    found = set(frame["status"].dropna().astype(str))
    columns = [*STATUSES, *sorted(found - set(STATUSES))]
    counts = (
        _groups(frame, keys)["status"]
        .value_counts()
        .unstack(fill_value=0)
        .reindex(columns=columns, fill_value=0)
        .astype("int64")
    )
    counts.columns.name = None
    counts["total"] = counts.sum(axis=1)
    return counts.reset_index(drop=not keys)


def success_rate(attempts: pd.DataFrame, by: By = ("partner_name", "event")) -> pd.DataFrame:
    """Columns ``*by, attempts, succeeded, success_rate``: the attempt success rate per group.

    Takes attempts (``load_attempts``): a delivery that took three tries counts three attempts,
    one of them succeeded.
    """
    if "outcome" not in attempts.columns:
        raise ValueError("the attempt success rate is read from an attempts frame (outcome)")
    keys = _keys(by)
    groups = _groups(attempts.assign(_succeeded=attempts["outcome"].eq(DELIVERED)), keys)["_succeeded"]
    out = pd.DataFrame({"attempts": groups.size(), "succeeded": groups.sum()}).astype("int64")
    out["success_rate"] = (out["succeeded"] / out["attempts"]).round(DECIMALS)
    return out.reset_index(drop=not keys)


def attempts_to_success(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Columns ``attempts, deliveries, share``: tries the delivered ones took, 1..max filled."""
    tries = deliveries.loc[deliveries["status"].eq(DELIVERED), "attempts"].astype("int64")
    counts = tries.value_counts()
    most = int(counts.index.max()) if len(counts) else 0
    counts = counts.reindex(range(1, most + 1), fill_value=0).astype("int64")
    total = counts.sum()
    return pd.DataFrame(
        {
            "attempts": counts.index.to_numpy(dtype="int64"),
            "deliveries": counts.to_numpy(),
            "share": (counts / total).round(DECIMALS).to_numpy(dtype="float64"),
        }
    )


def latency_percentiles(
    attempts: pd.DataFrame,
    by: By = None,
    percentiles: Sequence[float] = PERCENTILES,
    resolution_ms: int | None = None,
) -> pd.DataFrame:
    """Columns ``*by, attempts, p50, p90, p99``: ``duration_ms`` percentiles of every attempt.

    ``duration_ms`` is measured in real time, so it jitters by a few milliseconds from run to run.
    With ``resolution_ms`` each percentile is an observed duration (the lower one where a
    percentile falls between two) rounded down to a multiple of ``resolution_ms``: read at a
    resolution coarser than the jitter, the same attempts give the same table every time.
    """
    if resolution_ms is None:
        return _percentile_table(attempts["duration_ms"], attempts, by, percentiles, "attempts")
    if resolution_ms < 1:
        raise ValueError("resolution_ms is a positive number of milliseconds")
    table = _percentile_table(
        attempts["duration_ms"], attempts, by, percentiles, "attempts", interpolation="lower"
    )
    columns = [f"p{p:g}" for p in percentiles]
    table[columns] = (table[columns] // resolution_ms * resolution_ms).astype("Int64")
    return table


def latency_bands(attempts: pd.DataFrame, by: By = "partner_name", step_ms: int = 50) -> pd.DataFrame:
    """Columns ``*by, attempts``, then one per band of ``step_ms``: the share of attempts that took
    that long (``0-49 ms``, ``50-99 ms``, ... up to the slowest attempt's band, zeros included).
    There are ``MAX_BANDS`` at most, the last open-ended (``≥ 450 ms``): one attempt that ran to
    the webhook timeout (15 s by default) would otherwise add 300 bands of 50 ms, and a table and
    chart nobody can read.

    Percentiles hide what differs between endpoints that mostly answer at once (every median is
    the first band); the bands show how often each one is slow. ``duration_ms`` is measured in
    real time and jitters by a few milliseconds; at a step coarser than that, the same attempts
    fall in the same bands every run.
    """
    if step_ms < 1:
        raise ValueError("step_ms is a positive number of milliseconds")
    keys = _keys(by)
    slowest = (MAX_BANDS - 1) * step_ms  # where the open-ended band starts
    band = (attempts["duration_ms"].astype("int64") // step_ms * step_ms).clip(upper=slowest)
    lows = range(0, int(band.max()) + 1, step_ms) if len(band) else range(0)
    counts = (
        _groups(attempts.assign(_band=band), keys)["_band"]
        .value_counts()
        .unstack(fill_value=0)
        .reindex(columns=list(lows), fill_value=0)
        .astype("int64")
    )
    total = counts.sum(axis=1)
    out = pd.DataFrame({"attempts": total})
    for low in lows:
        name = f"≥ {low} ms" if low == slowest else f"{low}-{low + step_ms - 1} ms"
        out[name] = (counts[low] / total).round(DECIMALS)
    return out.reset_index(drop=not keys)


def failure_reasons(attempts: pd.DataFrame, by: By = None) -> pd.DataFrame:
    """Columns ``*by, error_class, status_code, attempts, share``: the attempts that did not
    succeed, by reason.

    ``share`` is of every attempt in the group, so a group's shares and its attempt success rate
    add up to 1. Within a group, most frequent first, ties by class then code; no answer
    (``status_code`` NA) sorts last.
    """
    keys = _keys(by)
    failed = attempts[attempts["outcome"].ne(DELIVERED)]
    counts = failed.groupby([*keys, "error_class", "status_code"], dropna=False).size()
    out = counts.rename("attempts").astype("int64").reset_index()
    if keys:
        totals = attempts.groupby(keys, dropna=False).size().rename("_total").reset_index()
        out = out.merge(totals, on=keys, how="left")
    else:
        out["_total"] = len(attempts)
    out["share"] = (out["attempts"] / out["_total"]).round(DECIMALS)
    out = out.drop(columns="_total").sort_values(
        [*keys, "attempts", "error_class", "status_code"],
        ascending=[*(True for _ in keys), False, True, True],
        na_position="last",
        kind="stable",
    )
    return out.reset_index(drop=True)


def time_to_delivery(
    deliveries: pd.DataFrame, by: By = None, percentiles: Sequence[float] = PERCENTILES
) -> pd.DataFrame:
    """Columns ``*by, deliveries, p50, p90, p99``: seconds from created to delivered."""
    delivered = deliveries[deliveries["status"].eq(DELIVERED) & deliveries["delivered_at"].notna()]
    seconds = (delivered["delivered_at"] - delivered["created_at"]).dt.total_seconds()
    return _percentile_table(seconds, delivered, by, percentiles, "deliveries")


# Where a delivery's time lands: at its first attempt, after a retry or two, or after the long
# retries (service.webhooks.retry's default schedule waits 5 s, 5 min, 30 min, then hours).
DELIVERY_TIME_BANDS = ((1.0, "under 1 s"), (60.0, "1 s-1 min"), (600.0, "1-10 min"), (3600.0, "10 min-1 h"))
DELIVERY_TIME_LAST = "over 1 h"


def time_to_delivery_bands(deliveries: pd.DataFrame, by: By = "partner_name") -> pd.DataFrame:
    """Columns ``*by, deliveries``, then one per band of ``DELIVERY_TIME_BANDS``: the share of the
    group's delivered deliveries that took that long from publishing to the attempt that delivered."""
    keys = _keys(by)
    delivered = deliveries[deliveries["status"].eq(DELIVERED) & deliveries["delivered_at"].notna()]
    seconds = (delivered["delivered_at"] - delivered["created_at"]).dt.total_seconds()
    labels = [label for _, label in DELIVERY_TIME_BANDS] + [DELIVERY_TIME_LAST]
    edges = [-np.inf] + [edge for edge, _ in DELIVERY_TIME_BANDS] + [np.inf]
    band = pd.cut(seconds, edges, right=False, labels=labels)
    counts = (
        _groups(delivered.assign(_band=band), keys)["_band"]
        .value_counts(sort=False)
        .unstack(fill_value=0)
        .reindex(columns=labels, fill_value=0)
        .astype("int64")
    )
    total = counts.sum(axis=1)
    out = pd.DataFrame({"deliveries": total})
    for label in labels:
        out[label] = (counts[label] / total).round(DECIMALS)
    out.columns.name = None
    return out.reset_index(drop=not keys)


def retries_that_succeeded(deliveries: pd.DataFrame, by: By = ("partner_name",)) -> pd.DataFrame:
    """Columns ``*by, delivered, retried, share``: delivered ones that needed more than one try."""
    keys = _keys(by)
    delivered = deliveries[deliveries["status"].eq(DELIVERED)]
    groups = _groups(delivered.assign(_retried=delivered["attempts"].gt(1)), keys)["_retried"]
    out = pd.DataFrame({"delivered": groups.size(), "retried": groups.sum()}).astype("int64")
    out["share"] = (out["retried"] / out["delivered"]).round(DECIMALS)
    return out.reset_index(drop=not keys)


def _keys(by: By) -> list[str]:
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def _groups(frame: pd.DataFrame, keys: list[str]) -> DataFrameGroupBy:
    if keys:
        return frame.groupby(keys, dropna=False, sort=True)
    # One group of every row, so the overall answer takes the same path as a grouped one.
    return frame.groupby(np.zeros(len(frame), dtype="int64"))


def _percentile_table(
    values: pd.Series,
    frame: pd.DataFrame,
    by: By,
    percentiles: Sequence[float],
    count_name: str,
    interpolation: str = "linear",
) -> pd.DataFrame:
    if any(not 0 <= p <= 100 for p in percentiles):
        raise ValueError("percentiles are between 0 and 100")
    keys = _keys(by)
    groups = _groups(frame.assign(_value=values.astype("float64")), keys)["_value"]
    out = pd.DataFrame({count_name: groups.size().astype("int64")})
    for p in percentiles:
        out[f"p{p:g}"] = groups.quantile(p / 100, interpolation=interpolation).round(DECIMALS)
    return out.reset_index(drop=not keys)


# --- what an operator should act on -----------------------------------------------------------

PAUSED = "paused"
DISABLED = "disabled"  # by the service, after SERVICE_WEBHOOK_DISABLE_AFTER of unbroken failure
REMOVED = "removed"  # by an admin: kept so history names it, never sent to again
FAILED = "failed"
UNRELIABLE = "unreliable"
CLI = "python -m service partners"
ACTION_COLUMNS = ("partner_name", "issue", "count", "detail", "command")
NOTHING_TO_ACT_ON = (
    "Nothing to act on: no partner is paused or disabled, no delivery has failed, and every partner's "
    "attempt success rate is at least {threshold:.0%}."
)


def action_items(
    partners: pd.DataFrame,
    deliveries: pd.DataFrame,
    attempts: pd.DataFrame,
    min_success_rate: float = MIN_SUCCESS_RATE,
    *,
    now: pd.Timestamp | None = None,
    window: tuple[str, pd.Timedelta] = RECENT_WINDOWS[0],
) -> pd.DataFrame:
    """Columns ``partner_name, issue, count, detail, command``: one row per partner and issue.

    With ``now``, ``unreliable`` is judged over ``window`` (the last 24 hours by default) ending at
    ``now``: a partner that failed last week and has answered since is not on the list, and one
    with no attempt in the window has nothing to judge. Without it, over all of history.

    Issues, in the order to handle them: ``disabled`` (the service stopped sending after the
    partner failed without a break for ``SERVICE_WEBHOOK_DISABLE_AFTER``; ``count`` events wait
    for a resume once the endpoint is fixed), ``paused`` (the partner answered 410 Gone, or an
    admin paused it: a 410 answered before a resume is not the cause, ``_pausing_answers``;
    ``count`` events wait for a resume), ``failed`` (``count`` deliveries spent their retry
    schedule; an admin retry sends them again), ``unreliable`` (an active partner whose attempt
    success rate, before rounding, is below ``min_success_rate``; ``count`` attempts did not succeed).
    Frames as ``load_partners``, ``load_deliveries`` and ``load_attempts`` return them; no row
    means nothing to act on (``action_report`` says so). A removed partner is never on the list:
    nothing can be sent to it again, and the commands would answer 404.

    An event waits in any state of ``WAITING``: ``pending``, ``delivering``, or ``batching`` and
    ``batched`` for a batch. Given ``with_batches``, a batch request is not counted beside the
    events it carries.
    """
    rows: list[dict[str, object]] = []
    present = partners[partners["status"].ne(REMOVED)]
    for partner in present.sort_values(["name", "id"], kind="stable").itertuples():
        mine = deliveries[deliveries["partner_id"].eq(partner.id)]
        tried = attempts[attempts["partner_id"].eq(partner.id)]
        waiting = int(events_only(mine)["status"].isin(WAITING).sum())

        def add(issue: str, count: int, detail: str, command: str, name: str = partner.name) -> None:
            rows.append(
                {"partner_name": name, "issue": issue, "count": count, "detail": detail, "command": command}
            )

        if partner.status == PAUSED:
            gone = _pausing_answers(mine, tried)
            why = f"after answering {gone['status_code'].iloc[-1]}" if len(gone) else "by an admin"
            add(
                PAUSED,
                waiting,
                f"paused {partner.updated_at:%Y-%m-%d %H:%M} UTC {why}; "
                "resume once the partner says the endpoint is back",
                f"{CLI} resume {partner.id}",
            )
        if partner.status == DISABLED:
            add(
                DISABLED,
                waiting,
                f"disabled {partner.updated_at:%Y-%m-%d %H:%M} UTC after failing without a break; "
                "fix or update its URL, then resume",
                f"{CLI} resume {partner.id}",
            )
        failed = requests_only(mine)[requests_only(mine)["status"].eq(FAILED)]
        if len(failed):
            last = tried[tried["delivery_id"].isin(failed["id"])].groupby("delivery_id").tail(1)
            add(
                FAILED,
                len(failed),
                f"retry schedule spent; last errors: {_tally(last['error_class'])}",
                f"{CLI} retry {partner.id}",
            )
        judged, over = tried, ""
        if now is not None:
            label, length = window
            judged = tried[tried["started_at"].gt(now - length) & tried["started_at"].le(now)]
            over = f" over the {label}"
        if len(judged) and partner.status not in (PAUSED, DISABLED):  # their first step is a resume
            [rate] = success_rate(judged, by=None).itertuples()
            exact = rate.succeeded / rate.attempts  # the table's rate is rounded, for display only
            if exact < min_success_rate:
                add(
                    UNRELIABLE,
                    rate.attempts - rate.succeeded,
                    f"{SUCCESS_RATE}{over} {percent(exact, min_success_rate)}, "
                    f"below {min_success_rate:.0%}; "
                    f"errors: {_tally(judged.loc[judged['outcome'].ne(DELIVERED), 'error_class'])}",
                    f"{CLI} test {partner.id}",
                )
    order = {DISABLED: 0, PAUSED: 1, FAILED: 2, UNRELIABLE: 3}
    out = pd.DataFrame(rows, columns=list(ACTION_COLUMNS)).astype({"count": "int64"})
    out = out.sort_values(
        ["issue", "partner_name"], key=lambda column: column.map(order) if column.name == "issue" else column
    )
    return out.reset_index(drop=True)


def _pausing_answers(deliveries: pd.DataFrame, attempts: pd.DataFrame) -> pd.DataFrame:
    """The 410 answers that keep the partner paused now: none when an admin paused it.

    A 410 pauses its partner and puts its delivery back to ``pending``, due again on resume, which
    sends it at once. So while a 410 is still the last attempt of a delivery still ``pending``, the
    partner has not been resumed since, and the pause is that answer's. A 410 followed by another
    attempt of its delivery was answered before a resume: the partner was paused again since, by
    an admin (the log holds no word of it). ``updated_at`` cannot tell: a 410's pause comes after
    the attempt started, and any edit of the partner (name, URL, secret) moves it later still.
    """
    last = attempts.groupby("delivery_id", sort=False).tail(1)  # attempts come oldest first
    pending = deliveries.loc[deliveries["status"].eq(str(DeliveryStatus.PENDING)), "id"]
    return last[last["outcome"].eq(PAUSED) & last["delivery_id"].isin(pending)]


def percent(rate: float, threshold: float, decimals: int = 0) -> str:
    """``rate`` in percent to ``decimals`` places; one under ``threshold`` that rounding would lift
    to it is cut one place further instead (94.9%, not 95%): below the line never reads as on it."""
    text = f"{rate:.{decimals}%}"
    if rate < threshold <= float(text.rstrip("%")) / 100:
        places = decimals + 1
        text = f"{math.floor(rate * 10 ** (places + 2)) / 10**places:.{places}f}%"
    return text


def _tally(classes: pd.Series) -> str:
    """``"http_500: 61, connect: 22"``: most frequent first, ties alphabetical."""
    counts = classes.fillna("none").value_counts()
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name}: {count}" for name, count in ordered)


def action_report(actions: pd.DataFrame, min_success_rate: float = MIN_SUCCESS_RATE) -> str:
    """The commands for ``action_items``' rows, each under a ``# partner: issue`` line; or, with no
    row, one sentence saying there is nothing to act on (an empty table reads as a mistake)."""
    if actions.empty:
        return NOTHING_TO_ACT_ON.format(threshold=min_success_rate)
    return "\n".join(
        f"# {item.partner_name}: {item.issue}\n{item.command}" for item in actions.itertuples()
    )
