"""Webhook delivery health: pure functions on ``load_deliveries`` / ``load_attempts`` frames.

``by`` names the grouping columns (a name, several, or ``None``/``()`` for one overall row); groups
come out sorted, and a missing key (a partner row since deleted) is its own group, not dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

DECIMALS = 4  # enough to tell rates apart, few enough that notebook output never jitters
PERCENTILES = (50, 90, 99)  # the median, the usual tail, the rare tail
DELIVERED = "delivered"
STATUSES = ("pending", "delivering", "delivered", "failed")  # service.webhooks.outbox.STATUSES

By = str | Sequence[str] | None


def states(frame: pd.DataFrame, by: By = "partner_name") -> pd.DataFrame:
    """Columns ``*by, pending, delivering, delivered, failed, total``: deliveries in each state.

    Every state has its column, zeros included, so a state nobody is in still shows.
    """
    keys = _keys(by)
    counts = (
        _groups(frame, keys)["status"]
        .value_counts()
        .unstack(fill_value=0)
        .reindex(columns=list(STATUSES), fill_value=0)
        .astype("int64")
    )
    counts.columns.name = None
    counts["total"] = counts.sum(axis=1)
    return counts.reset_index(drop=not keys)


def success_rate(frame: pd.DataFrame, by: By = ("partner_name", "event")) -> pd.DataFrame:
    """Columns ``*by, deliveries, delivered, rate``: the delivered share of deliveries.

    Takes deliveries (``status``) or attempts (``outcome``, collapsed per ``delivery_id``). Pending
    deliveries count as not delivered, so read a recent window's rate with that in mind.
    """
    keys = _keys(by)
    if "status" in frame.columns:
        per_delivery = frame.assign(_delivered=frame["status"].eq(DELIVERED))
    elif {"outcome", "delivery_id"} <= set(frame.columns):
        # The by-columns describe the delivery (partner, event), so they are constant within one.
        per_delivery = (
            frame.assign(_delivered=frame["outcome"].eq(DELIVERED))
            .groupby(["delivery_id", *keys], dropna=False, sort=True)["_delivered"]
            .any()
            .reset_index()
        )
    else:
        raise ValueError("need a deliveries frame (status) or an attempts frame (outcome)")
    groups = _groups(per_delivery, keys)["_delivered"]
    out = pd.DataFrame({"deliveries": groups.size(), "delivered": groups.sum()}).astype("int64")
    out["rate"] = (out["delivered"] / out["deliveries"]).round(DECIMALS)
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


def failure_reasons(attempts: pd.DataFrame) -> pd.DataFrame:
    """Columns ``error_class, status_code, attempts, share`` over attempts that did not deliver.

    Most frequent first, ties by class then code; no answer (``status_code`` NA) sorts last.
    """
    failed = attempts[attempts["outcome"].ne(DELIVERED)]
    counts = failed.groupby(["error_class", "status_code"], dropna=False).size()
    out = counts.rename("attempts").astype("int64").reset_index()
    out["share"] = (out["attempts"] / out["attempts"].sum()).round(DECIMALS)
    out = out.sort_values(
        ["attempts", "error_class", "status_code"],
        ascending=[False, True, True],
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
FAILED = "failed"
PENDING = "pending"
# An endpoint that fails more than one attempt in twenty is worth a word with its owner, even when
# retries hide it: each failure delays a delivery by a retry delay at least.
MIN_ATTEMPT_SUCCESS = 0.95
CLI = "python -m service partners"
ACTION_COLUMNS = ("partner_name", "issue", "count", "detail", "command")


def action_items(
    partners: pd.DataFrame,
    deliveries: pd.DataFrame,
    attempts: pd.DataFrame,
    min_attempt_success: float = MIN_ATTEMPT_SUCCESS,
) -> pd.DataFrame:
    """Columns ``partner_name, issue, count, detail, command``: one row per partner and issue.

    Issues, in the order to handle them: ``paused`` (the partner answered 410 Gone, or an admin
    paused it; ``count`` deliveries wait for a resume), ``failed`` (``count`` deliveries spent their
    retry schedule; an admin retry sends them again), ``unreliable`` (fewer than
    ``min_attempt_success`` of its attempts succeeded; ``count`` failed attempts). Frames as
    ``load_partners``, ``load_deliveries`` and ``load_attempts`` return them.
    """
    rows: list[dict[str, object]] = []
    for partner in partners.sort_values(["name", "id"], kind="stable").itertuples():
        mine = deliveries[deliveries["partner_id"].eq(partner.id)]
        tried = attempts[attempts["partner_id"].eq(partner.id)]

        def add(issue: str, count: int, detail: str, command: str, name: str = partner.name) -> None:
            rows.append(
                {"partner_name": name, "issue": issue, "count": count, "detail": detail, "command": command}
            )

        if partner.status == PAUSED:
            gone = tried[tried["outcome"].eq(PAUSED)]
            why = f"after answering {gone['status_code'].iloc[-1]}" if len(gone) else "by an admin"
            add(
                PAUSED,
                int(mine["status"].eq(PENDING).sum()),
                f"paused {partner.updated_at:%Y-%m-%d %H:%M} UTC {why}; "
                "resume once the partner says the endpoint is back",
                f"{CLI} resume {partner.id}",
            )
        failed = mine[mine["status"].eq(FAILED)]
        if len(failed):
            last = tried[tried["delivery_id"].isin(failed["id"])].groupby("delivery_id").tail(1)
            add(
                FAILED,
                len(failed),
                f"retry schedule spent; last errors: {_tally(last['error_class'])}",
                f"{CLI} retry {partner.id}",
            )
        answered = tried[tried["outcome"].ne(PAUSED)]
        if len(answered):
            succeeded = answered["outcome"].eq(DELIVERED)
            share = float(succeeded.mean())
            if share < min_attempt_success:
                add(
                    "unreliable",
                    int((~succeeded).sum()),
                    f"{share:.0%} of attempts succeeded; "
                    f"errors: {_tally(answered.loc[~succeeded, 'error_class'])}",
                    f"{CLI} test {partner.id}",
                )
    order = {PAUSED: 0, FAILED: 1, "unreliable": 2}
    out = pd.DataFrame(rows, columns=list(ACTION_COLUMNS)).astype({"count": "int64"})
    out = out.sort_values(
        ["issue", "partner_name"], key=lambda column: column.map(order) if column.name == "issue" else column
    )
    return out.reset_index(drop=True)


def _tally(classes: pd.Series) -> str:
    """``"http_500: 61, connect: 22"``: most frequent first, ties alphabetical."""
    counts = classes.fillna("none").value_counts()
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name}: {count}" for name, count in ordered)
