"""Figures for the answers ``waitlist`` and ``deliveries`` return; each takes that frame as is.

Figures are built with ``matplotlib.figure.Figure`` directly, not pyplot: nothing registers in a
global figure list, so notebooks show each figure once and tests leak nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, cast

import matplotlib
import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager
from matplotlib.ft2font import FT2Font
from matplotlib.ticker import MaxNLocator

from analytics.deliveries import percent
from analytics.waitlist import FREQ
from service.text import visible

SIZE = (7.0, 4.0)  # inches; fits a notebook column without scrolling
NONE_LABEL = "(none)"  # a missing key, e.g. no HTTP answer, still needs a readable label
BAR_LABEL_FORMAT = "{:g}"
# Fixes the ids matplotlib writes into SVG (clip paths and the like), which are random otherwise.
SVG_HASH_SALT = "launch-waitlist-notebooks"
# No creation date and no matplotlib version in the file: the same chart is the same bytes.
SVG_METADATA = {"Date": None, "Creator": None}
THRESHOLD_COLOR = "tab:red"
BAR_COLOR = "tab:blue"  # matplotlib's first colour, as every other bar chart here
BELOW_COLOR = "tab:orange"  # a rate under the threshold
LATENCY_COLOURS = "Blues"  # the slower, the darker
DELIVERY_TIME_COLOURS = "Greens"  # the later, the darker
SHORT_BAR = 0.1  # a success-rate bar lower than this carries its label above it, not inside
MIN_LABELLED = 0.05  # parts of a stacked bar narrower than this carry no label: it would not fit
DARK = 0.5  # a colour darker than this (mean of its RGB) takes white text
QUALITATIVE = "tab10"  # failure reasons: one colour each, the same in every bar
QUALITATIVE_COLOURS = 10
GREY = 7  # tab10's grey, kept for "other": no reason drawn in its own colour is grey
# Reasons drawn in a colour of their own (tab10 less its grey); past this many, the rarest are
# drawn together as "other", so no two reasons in a legend share a colour.
MAX_REASONS = QUALITATIVE_COLOURS - 1
OTHER_REASONS = "other ({count} reason{s})"
MAX_TIME_TICKS = 12  # dates on a time axis, at most: more would overlap
# Labels from data are cut to this many characters, the last an ellipsis: a project name may have
# 120 (the service's limit) and a partner's 200, and one such label leaves constrained layout no
# room for the axes, so every label is clipped. The tables beside the charts keep the full text.
MAX_LABEL = 32
ELLIPSIS = "…"
# What one period is, by the step ``waitlist.registrations_over_time`` took (``attrs[FREQ]``) or,
# for a frame without it, measured between periods; periods are labelled by their start, and any
# other step reads "period starting".
PERIOD_NAMES = {"D": "day", "W": "week starting", "MS": "month starting"}
# rcParams' generic font families, each standing for its own list of fonts (``font.<family>``).
GENERIC_FAMILIES = ("sans-serif", "serif", "monospace", "cursive", "fantasy")


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
    """One line per intent, from ``waitlist.registrations_over_time``.

    The time axis spans the periods of the data and no more (half a period either side, so a
    single day is a day wide, not years), and is named by their step (``PERIOD_NAMES``: a day, a
    week starting, a month starting); the counts start at zero.
    """
    fig, ax = _figure()
    periods = pd.DatetimeIndex(over_time["period"]).tz_convert(None)  # UTC, as matplotlib dates
    step = periods[1] - periods[0] if len(periods) > 1 else pd.Timedelta(days=1)
    for intent in over_time.columns.drop("period"):
        ax.plot(periods, over_time[intent].to_numpy(dtype="float64"), marker="o", label=str(intent))
    if len(periods):
        ax.set_xlim(periods[0] - step / 2, periods[-1] + step / 2)
        every = -(-len(periods) // MAX_TIME_TICKS)  # ceiling: every n-th period has its date
        ax.set_xticks(periods[::every])
        # In UTC, as the axis says, whatever time zone matplotlib's settings name.
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d", tz="UTC"))  # type: ignore[no-untyped-call]
        fig.autofmt_xdate()
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    unit = PERIOD_NAMES.get(over_time.attrs.get(FREQ) or _step_of(periods) or "", "period starting")
    ax.set(title="Registrations over time", xlabel=f"{unit} (UTC)", ylabel="registrations")
    _legend(ax, title="intent")
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


def success_rate_chart(rates: pd.DataFrame, threshold: float | None = None) -> Figure:
    """Bars of the attempt success rate per group, from ``deliveries.success_rate``, labelled in
    percent; with a ``threshold``, a dashed line at it and the bars under it in a warning colour
    (below it, a partner is an action item). Under it means the rate before rounding
    (``succeeded / attempts``): 94.995% rounds to the 95% of the table but is below."""
    fig, ax = _figure()
    keys = [c for c in rates.columns if c not in ("attempts", "succeeded", "success_rate")]
    values = rates["success_rate"].to_numpy(dtype="float64")
    exact = values
    if {"attempts", "succeeded"} <= set(rates.columns):
        exact = (rates["succeeded"] / rates["attempts"]).to_numpy(dtype="float64")
    below = [threshold is not None and rate < threshold for rate in exact]
    colours = [BELOW_COLOR if under else BAR_COLOR for under in below]
    positions = np.arange(len(values))
    container = ax.bar(positions, values, color=colours)
    ax.set_xticks(positions, _shortened(_labels(rates, keys)), parse_math=False)
    # Inside the bars, so no label sits on the threshold line; a bar too short to hold its label
    # (a partner at 0 % has none at all) carries it above, in black, or it would read as no data.
    short = values < SHORT_BAR
    labels = [
        percent(rate, threshold, 1) if under and threshold is not None else f"{value:.1%}"
        for value, rate, under in zip(values, exact, below, strict=True)
    ]
    ax.bar_label(container, labels=[t if not s else "" for t, s in zip(labels, short, strict=True)],
                 label_type="center", color="white")  # fmt: skip
    if short.any():
        above = [t if s else "" for t, s in zip(labels, short, strict=True)]
        ax.bar_label(container, labels=above, label_type="edge", color="black", padding=2)
    ax.set_ylim(0, 1.05)  # a rate is a share, so keep the scale honest even when all are high
    ax.set(title="Attempt success rate", ylabel="attempts answered 2xx (share)")
    if threshold is not None:
        ax.axhline(threshold, color=THRESHOLD_COLOR, linestyle="--", label=f"threshold {threshold:.0%}")
        ax.legend(loc="lower right")
    return fig


def latency_bands_chart(bands: pd.DataFrame) -> Figure:
    """One horizontal bar per group, split into its latency bands, from ``deliveries.latency_bands``;
    light is fast, dark is slow."""
    fig, ax = _figure()
    _share_bars(ax, bands, "attempts", LATENCY_COLOURS)
    ax.set(title="Attempt latency", xlabel="share of attempts")
    _legend(ax, title="took", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def failure_reasons_chart(reasons: pd.DataFrame) -> Figure:
    """Failed attempts by reason, from ``deliveries.failure_reasons``: with grouping columns, one
    horizontal bar per group split by reason (as shares of the group's attempts); without, one bar
    per reason (as counts)."""
    fig, ax = _figure()
    keys = [c for c in reasons.columns if c not in ("error_class", "status_code", "attempts", "share")]
    if not keys:
        _barh(ax, _labels(reasons, ["error_class", "status_code"]), reasons["attempts"])
        ax.set(title="Why attempts failed", xlabel="failed attempts")
        return fig
    reason = pd.Series(_labels(reasons, ["error_class", "status_code"]), index=reasons.index)
    order = reasons.groupby(reason, sort=False)["attempts"].sum().sort_values(ascending=False, kind="stable")
    named = list(order.index)
    palette = matplotlib.colormaps[QUALITATIVE]
    colours = [palette(hue) for hue in range(QUALITATIVE_COLOURS) if hue != GREY][: len(named)]
    if len(named) > MAX_REASONS:  # every reason drawn keeps a colour of its own; the rarest share grey
        rest = len(named) - MAX_REASONS
        other = OTHER_REASONS.format(count=rest, s="s" if rest > 1 else "")
        reason = reason.where(reason.isin(named[:MAX_REASONS]), other)
        named = [*named[:MAX_REASONS], other]
        colours.append(palette(GREY))
    table = reasons.assign(_group=_labels(reasons, keys), _reason=reason).pivot_table(
        index="_group", columns="_reason", values="share", aggfunc="sum", fill_value=0.0, sort=False
    )
    _stacked(ax, list(table.index), table[named], colours)
    ax.set(title="Why attempts failed, per partner", xlabel="share of the partner's attempts")
    # Beside the bars, not over them.
    _legend(ax, title="reason", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def time_to_delivery_chart(bands: pd.DataFrame) -> Figure:
    """One horizontal bar per group, split by how long its deliveries took to arrive, from
    ``deliveries.time_to_delivery_bands``; light is soon, dark is late."""
    fig, ax = _figure()
    _share_bars(ax, bands, "deliveries", DELIVERY_TIME_COLOURS)
    ax.set(title="Time to delivery", xlabel="share of delivered deliveries")
    _legend(ax, title="after publishing", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE, layout="constrained")
    return fig, fig.subplots()


def _bars(ax: Axes, labels: list[str], values: pd.Series) -> None:
    positions = np.arange(len(labels))
    container = ax.bar(positions, values.to_numpy(dtype="float64"))
    ax.set_xticks(positions, _shortened(labels), parse_math=False)
    ax.bar_label(container, fmt=BAR_LABEL_FORMAT)


def _stacked(ax: Axes, labels: list[str], parts: pd.DataFrame, colours: list[Any]) -> list[BarContainer]:
    """Horizontal bars, one per label, each split into ``parts``' columns left to right."""
    positions = np.arange(len(labels))
    left = np.zeros(len(labels))
    containers = []
    for column, colour in zip(parts.columns, colours, strict=True):
        values = parts[column].to_numpy(dtype="float64")
        containers.append(ax.barh(positions, values, left=left, color=colour, label=_short(str(column))))
        left += values
    ax.set_yticks(positions, _shortened(labels), parse_math=False)
    ax.invert_yaxis()  # the first group at the top, as in the tables
    return containers


def _share_bars(ax: Axes, frame: pd.DataFrame, count: str, colourmap: str) -> None:
    """Stacked bars of shares per group, each part over ``MIN_LABELLED`` labelled in percent.

    ``frame`` is laid out ``*by, count, *shares``, as the band analyses return them.
    """
    split = frame.columns.get_loc(count)
    keys, columns = list(frame.columns[:split]), list(frame.columns[split + 1 :])
    colours = list(matplotlib.colormaps[colourmap](np.linspace(0.15, 0.95, len(columns))))
    containers = _stacked(ax, _labels(frame, keys), frame[columns], colours)
    for container, colour in zip(containers, colours, strict=True):
        texts = [f"{bar.get_width():.0%}" if bar.get_width() >= MIN_LABELLED else "" for bar in container]
        ink = "white" if sum(colour[:3]) / 3 < DARK else "black"
        ax.bar_label(container, labels=texts, label_type="center", color=ink)
    ax.set_xlim(0, 1)


def _legend(ax: Axes, **options: Any) -> None:
    """A legend of the labelled parts, if any: an empty answer draws none (and no warning). Its
    labels are drawn as written, as the tick labels are (``_text``)."""
    if ax.get_legend_handles_labels()[0]:
        for text in ax.legend(**options).get_texts():
            text.set_parse_math(False)


def _barh(ax: Axes, labels: list[str], values: pd.Series) -> None:
    positions = np.arange(len(labels))
    container = ax.barh(positions, values.to_numpy(dtype="float64"))
    ax.set_yticks(positions, _shortened(labels), parse_math=False)
    ax.invert_yaxis()  # the frames come largest first, and a reader starts at the top
    ax.bar_label(container, fmt=BAR_LABEL_FORMAT)


def _text(column: pd.Series) -> list[str]:
    """Labels from data, drawn as written: every axis that shows them turns matplotlib's math
    text off (``parse_math=False``), so a project named ``$5 or $10`` is not set in math italics,
    and one named ``$\\frac$`` does not stop the chart. What cannot be seen is written as its
    escape (``_drawable``)."""
    return [NONE_LABEL if pd.isna(value) else _drawable(str(value)) for value in column]


def _drawable(label: str) -> str:
    """``label`` with each character that hides or reorders text written as its ``\\uXXXX``
    escape, as the console shows names (``service.text.visible``), and each character no font of
    the charts' families has a glyph for as its escape too (``\\U0001f680`` for a rocket): drawn,
    it would be an empty box and a "Glyph missing" warning, and two names differing only there
    would read alike. The tables beside the charts keep the text as stored."""
    if label.isascii():
        return label
    settings = cast("Mapping[str, Any]", matplotlib.rcParams)  # its stubs take only literal keys
    families = [
        name
        for family in settings["font.family"]
        for name in (settings[f"font.{family}"] if family in GENERIC_FAMILIES else [family])
    ]
    glyphs = _glyphs(tuple(dict.fromkeys(families)))
    return "".join(
        char if char.isascii() or ord(char) in glyphs else _escape(char) for char in visible(label)
    )


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@cache
def _glyphs(families: tuple[str, ...]) -> frozenset[int]:
    """The characters some installed font of ``families`` draws (rcParams' ``font.family``, each
    generic family standing for its list): matplotlib falls back from one font to the next."""
    files = {font.name: font.fname for font in fontManager.ttflist}
    fonts = [FT2Font(files[name]) for name in families if name in files]
    return frozenset(code for font in fonts for code in font.get_charmap())


def _short(label: str) -> str:
    """``label`` as drawn: cut to ``MAX_LABEL`` characters, the last an ellipsis, when longer."""
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1].rstrip() + ELLIPSIS


def _middle_cut(label: str) -> str:
    """``label`` cut to ``MAX_LABEL`` characters in its middle: its start and its end kept."""
    if len(label) <= MAX_LABEL:
        return label
    head = (MAX_LABEL - 1) // 2
    return label[:head].rstrip() + ELLIPSIS + label[-(MAX_LABEL - 1 - head) :].lstrip()


def _shortened(labels: list[str]) -> list[str]:
    """Each label as drawn; labels that differ only past the cut (two partners of one name, told
    apart by the id after it) keep their ends instead, so their bars are not drawn as twins."""
    short = [_short(label) for label in labels]
    sources: dict[str, set[str]] = {}
    for label, drawn in zip(labels, short, strict=True):
        sources.setdefault(drawn, set()).add(label)
    return [
        _middle_cut(label) if len(sources[drawn]) > 1 else drawn
        for label, drawn in zip(labels, short, strict=True)
    ]


def _step_of(periods: pd.DatetimeIndex) -> str | None:
    """The step between ``periods`` as ``PERIOD_NAMES`` names it: ``"D"``, ``"W"`` or ``"MS"``, None
    for any other. A single period, with nothing to measure, is a day, as the axis draws it."""
    if len(periods) < 2:
        return "D"
    steps = set(periods[1:] - periods[:-1])
    if steps == {pd.Timedelta(days=1)}:
        return "D"
    if steps == {pd.Timedelta(days=7)}:
        return "W"
    starts = periods.is_month_start.all() and (periods == periods.normalize()).all()
    if starts and all(pd.Timedelta(days=28) <= step <= pd.Timedelta(days=31) for step in steps):
        return "MS"
    return None


def _labels(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    if not keys:
        return ["all"] * len(frame)
    parts = [_text(frame[key]) for key in keys]
    return [" / ".join(row) for row in zip(*parts, strict=True)]
