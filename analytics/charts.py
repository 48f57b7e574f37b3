"""Figures for the answers ``waitlist`` and ``deliveries`` return; each takes that frame as is.

Figures are built with ``matplotlib.figure.Figure`` directly, not pyplot: nothing registers in a
global figure list, so notebooks show each figure once and tests leak nothing.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

SIZE = (7.0, 4.0)  # inches; fits a notebook column without scrolling
NONE_LABEL = "(none)"  # a missing key, e.g. no HTTP answer, still needs a readable label
BAR_LABEL_FORMAT = "{:g}"
# Fixes the ids matplotlib writes into SVG (clip paths and the like), which are random otherwise.
SVG_HASH_SALT = "launch-waitlist-notebooks"
# No creation date and no matplotlib version in the file: the same chart is the same bytes.
SVG_METADATA = {"Date": None, "Creator": None}


def inline_svg() -> None:
    """Show this notebook's figures inline as SVG that is byte-identical from run to run.

    SVG rather than PNG because nbval compares ``image/svg+xml`` outputs and skips ``image/png``
    ones: as SVG, a chart is held to the committed notebook like every table. Needs IPython.
    """
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    matplotlib.rcParams["svg.hashsalt"] = SVG_HASH_SALT
    matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as shapes: the same look without the font
    set_matplotlib_formats("svg", metadata=SVG_METADATA)  # type: ignore[no-untyped-call]


def intent_mix_chart(mix: pd.DataFrame) -> Figure:
    """Bars of registrations per intent, from ``waitlist.intent_mix``."""
    fig, ax = _figure()
    _bars(ax, _text(mix["intent"]), mix["count"])
    ax.set(title="Registrations by intent", xlabel="intent", ylabel="registrations")
    return fig


def registrations_over_time_chart(over_time: pd.DataFrame) -> Figure:
    """One line per intent, from ``waitlist.registrations_over_time``."""
    fig, ax = _figure()
    for intent in over_time.columns.drop("period"):
        ax.plot(over_time["period"], over_time[intent], marker="o", label=str(intent))
    ax.set(title="Registrations over time", xlabel="period (UTC)", ylabel="registrations")
    ax.legend(title="intent")
    return fig


def top_projects_chart(top: pd.DataFrame) -> Figure:
    """Horizontal bars, most named project on top, from ``waitlist.top_projects``."""
    fig, ax = _figure()
    _barh(ax, _text(top["project"]), top["count"])
    ax.set(title="Most named projects", xlabel="registrations")
    return fig


def message_length_chart(lengths: pd.Series, bins: int = 20) -> Figure:
    """Histogram of message lengths, from ``waitlist.message_lengths(...).lengths``."""
    fig, ax = _figure()
    ax.hist(lengths.to_numpy(dtype="float64"), bins=bins)
    ax.set(title="Message length", xlabel="characters", ylabel="messages")
    return fig


def success_rate_chart(rates: pd.DataFrame) -> Figure:
    """Bars of the delivered share per group, from ``deliveries.success_rate``."""
    fig, ax = _figure()
    keys = [c for c in rates.columns if c not in ("deliveries", "delivered", "rate")]
    _bars(ax, _labels(rates, keys), rates["rate"])
    ax.set_ylim(0, 1.05)  # a rate is a share, so keep the scale honest even when all are high
    ax.set(title="Delivery success rate", ylabel="delivered share")
    return fig


def latency_chart(latency: pd.DataFrame) -> Figure:
    """Grouped bars, one per percentile, from ``deliveries.latency_percentiles``."""
    fig, ax = _figure()
    percentile_columns = [c for c in latency.columns if c.startswith("p") and c[1:2].isdigit()]
    keys = [c for c in latency.columns if c not in percentile_columns and c != "attempts"]
    positions = np.arange(len(latency), dtype="float64")
    width = 0.8 / max(len(percentile_columns), 1)
    for i, column in enumerate(percentile_columns):
        ax.bar(positions + i * width, latency[column], width, label=column)
    ax.set_xticks(positions + width * (len(percentile_columns) - 1) / 2, _labels(latency, keys))
    ax.set(title="Attempt latency", ylabel="milliseconds")
    ax.legend(title="percentile")
    return fig


def failure_reasons_chart(reasons: pd.DataFrame) -> Figure:
    """Horizontal bars of failed attempts per reason, from ``deliveries.failure_reasons``."""
    fig, ax = _figure()
    _barh(ax, _labels(reasons, ["error_class", "status_code"]), reasons["attempts"])
    ax.set(title="Why attempts failed", xlabel="failed attempts")
    return fig


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE, layout="constrained")
    return fig, fig.subplots()


def _bars(ax: Axes, labels: list[str], values: pd.Series) -> None:
    positions = np.arange(len(labels))
    container = ax.bar(positions, values.to_numpy(dtype="float64"))
    ax.set_xticks(positions, labels)
    ax.bar_label(container, fmt=BAR_LABEL_FORMAT)


def _barh(ax: Axes, labels: list[str], values: pd.Series) -> None:
    positions = np.arange(len(labels))
    container = ax.barh(positions, values.to_numpy(dtype="float64"))
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()  # the frames come largest first, and a reader starts at the top
    ax.bar_label(container, fmt=BAR_LABEL_FORMAT)


def _text(column: pd.Series) -> list[str]:
    return [NONE_LABEL if pd.isna(value) else str(value) for value in column]


def _labels(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    if not keys:
        return ["all"] * len(frame)
    parts = [_text(frame[key]) for key in keys]
    return [" / ".join(row) for row in zip(*parts, strict=True)]
