"""Charts draw what their frames say: bar heights, labels and titles read back from the axes."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from io import BytesIO

import matplotlib
import matplotlib.dates as mdates
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from analytics import charts, waitlist

matplotlib.use("Agg")  # no display in tests; figures are rendered off-screen


def only_axes(fig: Figure) -> Axes:
    (ax,) = fig.axes
    return ax


def bars(ax: Axes) -> list[Rectangle]:
    patches = list(ax.patches)
    assert all(isinstance(patch, Rectangle) for patch in patches)
    return [patch for patch in patches if isinstance(patch, Rectangle)]


def heights(ax: Axes) -> list[float]:
    return [float(bar.get_height()) for bar in bars(ax)]


def widths(ax: Axes) -> list[float]:
    return [float(bar.get_width()) for bar in bars(ax)]


def ticks(labels: list[Text]) -> list[str]:
    return [label.get_text() for label in labels]


def render_png(fig: Figure) -> bytes:
    out = BytesIO()
    fig.savefig(out, format="png")  # PNG output always goes through the Agg renderer
    return out.getvalue()


MIX = pd.DataFrame(
    {"intent": ["arcade", "claim", "member"], "count": [2, 3, 1], "share": [0.3333, 0.5, 0.1667]}
)
OVER_TIME = pd.DataFrame(
    {
        "period": pd.to_datetime(["2024-03-01", "2024-03-02"], utc=True),
        "arcade": [0, 1],
        "claim": [2, 0],
        "member": [1, 1],
    }
)
TOP = pd.DataFrame({"project": ["moon dao", "zeta", "alpha"], "count": [2, 2, 1]})
LENGTHS = pd.Series([2, 11, 15, 15], name="length")
RATES = pd.DataFrame(
    {
        "partner_name": ["Acme", "Beta"],
        "event": ["order.created", "order.created"],
        "attempts": [2, 4],
        "succeeded": [1, 4],
        "success_rate": [0.5, 1.0],
    }
)
BANDS = pd.DataFrame(
    {"partner_name": ["Acme", "Beta"], "attempts": [10, 4], "0-49 ms": [0.8, 1.0], "50-99 ms": [0.2, 0.0]}
)
DELIVERY_TIMES = pd.DataFrame(
    {"partner_name": ["Acme", "Beta"], "deliveries": [4, 2], "under 1 s": [0.75, 0.5], "1 s-1 min": [0.25, 0.5]}
)
REASONS = pd.DataFrame(
    {
        "error_class": ["http_500", "timeout"],
        "status_code": pd.array([500, None], dtype="Int64"),
        "attempts": [2, 1],
        "share": [0.2, 0.1],
    }
)
REASONS_BY_PARTNER = pd.DataFrame(
    {
        "partner_name": ["Acme", "Acme", "Beta"],
        "error_class": ["http_500", "timeout", "timeout"],
        "status_code": pd.array([500, None, None], dtype="Int64"),
        "attempts": [2, 1, 3],
        "share": [0.2, 0.1, 0.75],
    }
)


def test_intent_mix_chart() -> None:
    """One bar per intent, as tall as its count, labelled with the intent."""
    ax = only_axes(charts.intent_mix_chart(MIX))
    assert heights(ax) == [2.0, 3.0, 1.0]
    assert ticks(ax.get_xticklabels()) == ["arcade", "claim", "member"]
    assert ax.get_title() == "Registrations by intent"


def test_registrations_over_time_chart() -> None:
    """One line per intent carrying its counts, named in the legend."""
    ax = only_axes(charts.registrations_over_time_chart(OVER_TIME))
    lines = {line.get_label(): np.asarray(line.get_ydata(), dtype=float).tolist() for line in ax.get_lines()}
    assert lines == {"arcade": [0.0, 1.0], "claim": [2.0, 0.0], "member": [1.0, 1.0]}
    legend = ax.get_legend()
    assert legend is not None
    assert ticks(legend.get_texts()) == ["arcade", "claim", "member"]


def test_top_projects_chart() -> None:
    """Horizontal bars in frame order, the first project at the top."""
    ax = only_axes(charts.top_projects_chart(TOP))
    assert widths(ax) == [2.0, 2.0, 1.0]
    assert ticks(ax.get_yticklabels()) == ["moon dao", "zeta", "alpha"]
    assert ax.yaxis_inverted()


NAMES_WITH_DOLLARS = ["$\\frac$", "$5 off or $10 cashback", "$FROG"]


def test_labels_from_data_are_drawn_as_written() -> None:
    """Project names (and any other label taken from data) are never read as math text: a name
    like `$\\frac$` used to stop the chart at drawing time, and `$5 off or $10` lost its dollars
    to math italics."""
    top = pd.DataFrame({"project": NAMES_WITH_DOLLARS, "count": [3, 2, 1]})
    fig = charts.top_projects_chart(top)
    ax = only_axes(fig)
    assert ticks(ax.get_yticklabels()) == NAMES_WITH_DOLLARS
    assert not any(label.get_parse_math() for label in ax.get_yticklabels())
    assert render_png(fig).startswith(b"\x89PNG")
    over_time = pd.DataFrame(
        {"period": pd.to_datetime(["2024-03-01", "2024-03-02"], utc=True), "$x$ or $\\frac$": [1, 2]}
    )
    fig = charts.registrations_over_time_chart(over_time)
    legend = only_axes(fig).get_legend()
    assert legend is not None
    assert [(text.get_text(), text.get_parse_math()) for text in legend.get_texts()] == [
        ("$x$ or $\\frac$", False)
    ]
    assert render_png(fig).startswith(b"\x89PNG")


def test_what_the_charts_font_cannot_draw_or_hides_is_drawn_as_its_escape() -> None:
    """A rocket or a CJK name has no glyph in DejaVu Sans: drawn, it was an empty box and a "Glyph
    missing" warning. It is written as its escape instead, as a zero-width space or a mark that
    reorders text is (the console shows names so); letters the font has stay as typed."""
    names = ["\U0001f680 Moon", "\u65e5\u672c", "Moon\u200bfrog", "Caf\u00e9", "a\u202eb"]
    with matplotlib.rc_context({"font.family": ["DejaVu Sans"]}), warnings.catch_warnings():
        warnings.simplefilter("error")  # a "Glyph ... missing" warning fails the test
        fig = charts.top_projects_chart(pd.DataFrame({"project": names, "count": [5, 4, 3, 2, 1]}))
        assert render_png(fig).startswith(b"\x89PNG")
    assert ticks(only_axes(fig).get_yticklabels()) == [
        "\\U0001f680 Moon",
        "\\u65e5\\u672c",
        "Moon\\u200bfrog",
        "Caf\u00e9",
        "a\\u202eb",
    ]


def test_message_length_chart() -> None:
    """The histogram holds every message once, across the requested bins."""
    ax = only_axes(charts.message_length_chart(LENGTHS, bins=4))
    assert heights(ax) == [1.0, 0.0, 1.0, 2.0]
    assert ax.get_xlabel() == "characters"


def test_success_rate_chart() -> None:
    """Bars of the attempt success rate, labelled by the grouping columns and in percent, on a 0..1 scale."""
    ax = only_axes(charts.success_rate_chart(RATES))
    assert heights(ax) == [0.5, 1.0]
    assert ticks(ax.get_xticklabels()) == ["Acme / order.created", "Beta / order.created"]
    assert [text.get_text() for text in ax.texts] == ["50.0%", "100.0%"]
    assert ax.get_ylim() == (0.0, 1.05)
    assert ax.get_legend() is None and not ax.get_lines()


def test_a_rate_too_low_for_its_bar_is_labelled_above_it_in_black() -> None:
    """A partner at 0 % has no bar to hold a white label: its "0.0%" sits above the axis in
    black, as does any rate under a tenth; the others keep theirs inside, in white."""
    rates = pd.DataFrame({"partner": ["Acme", "Beta", "Cato"], "attempts": [4, 20, 4],
                          "succeeded": [0, 1, 4], "success_rate": [0.0, 0.05, 1.0]})  # fmt: skip
    ax = only_axes(charts.success_rate_chart(rates))
    shown = {(text.get_text(), matplotlib.colors.to_hex(text.get_color())) for text in ax.texts if text.get_text()}
    assert shown == {("0.0%", "#000000"), ("5.0%", "#000000"), ("100.0%", "#ffffff")}


def test_success_rate_chart_draws_the_threshold() -> None:
    """With a threshold: a dashed line at it, in the legend, and the bars under it in the warning colour."""
    ax = only_axes(charts.success_rate_chart(RATES, threshold=0.95))
    [line] = ax.get_lines()
    assert line.get_ydata()[0] == 0.95 and line.get_linestyle() == "--"
    legend = ax.get_legend()
    assert legend is not None and ticks(legend.get_texts()) == ["threshold 95%"]
    below, above = (matplotlib.colors.to_hex(bar.get_facecolor()) for bar in bars(ax))
    assert (below, above) == (matplotlib.colors.to_hex(charts.BELOW_COLOR), matplotlib.colors.to_hex(charts.BAR_COLOR))


def test_a_rate_that_rounds_to_the_threshold_is_drawn_below_it() -> None:
    """968 of 1,019 attempts is 94.995%, 0.95 once rounded: its bar is in the warning colour, and
    labelled in figures that read below the line."""
    rates = pd.DataFrame({"partner": ["Big"], "attempts": [1019], "succeeded": [968], "success_rate": [0.95]})
    ax = only_axes(charts.success_rate_chart(rates, threshold=0.95))
    [bar] = bars(ax)
    assert matplotlib.colors.to_hex(bar.get_facecolor()) == matplotlib.colors.to_hex(charts.BELOW_COLOR)
    assert [text.get_text() for text in ax.texts] == ["94.99%"]


def test_success_rate_chart_overall() -> None:
    """An ungrouped rate is one bar labelled "all"."""
    overall = pd.DataFrame({"attempts": [6], "succeeded": [5], "success_rate": [0.8333]})
    ax = only_axes(charts.success_rate_chart(overall))
    assert heights(ax) == [0.8333]
    assert ticks(ax.get_xticklabels()) == ["all"]


@pytest.mark.parametrize(
    ("draw", "frame", "legend"),
    [
        (charts.latency_bands_chart, BANDS, ["0-49 ms", "50-99 ms"]),
        (charts.time_to_delivery_chart, DELIVERY_TIMES, ["under 1 s", "1 s-1 min"]),
    ],
)
def test_share_charts_stack_each_groups_bands(draw: Callable[[pd.DataFrame], Figure], frame: pd.DataFrame, legend: list[str]) -> None:
    """One bar per group, split into its bands left to right, each part as wide as its share."""
    ax = only_axes(draw(frame))
    shares = frame[legend]
    assert widths(ax) == pytest.approx([*shares[legend[0]], *shares[legend[1]]])
    assert [bar.get_x() for bar in bars(ax)] == pytest.approx([0.0, 0.0, *shares[legend[0]]])
    assert ticks(ax.get_yticklabels()) == ["Acme", "Beta"]
    found = ax.get_legend()
    assert found is not None and ticks(found.get_texts()) == legend
    assert ax.get_xlim() == (0.0, 1.0)


def test_failure_reasons_chart() -> None:
    """Horizontal bars per reason; a missing status code reads as "(none)"."""
    ax = only_axes(charts.failure_reasons_chart(REASONS))
    assert widths(ax) == [2.0, 1.0]
    assert ticks(ax.get_yticklabels()) == ["http_500 / 500", "timeout / (none)"]


def test_failure_reasons_chart_per_partner() -> None:
    """One bar per partner, split by reason as shares of its attempts; one colour per reason."""
    ax = only_axes(charts.failure_reasons_chart(REASONS_BY_PARTNER))
    # Reasons in order of their attempts overall: timeout (4), then http_500 (2).
    assert widths(ax) == pytest.approx([0.1, 0.75, 0.2, 0.0])
    assert ticks(ax.get_yticklabels()) == ["Acme", "Beta"]
    legend = ax.get_legend()
    assert legend is not None and ticks(legend.get_texts()) == ["timeout / (none)", "http_500 / 500"]


@pytest.mark.parametrize(
    "draw",
    [
        lambda: charts.intent_mix_chart(MIX),
        lambda: charts.registrations_over_time_chart(OVER_TIME),
        lambda: charts.top_projects_chart(TOP),
        lambda: charts.message_length_chart(LENGTHS),
        lambda: charts.success_rate_chart(RATES, threshold=0.95),
        lambda: charts.latency_bands_chart(BANDS),
        lambda: charts.failure_reasons_chart(REASONS),
        lambda: charts.failure_reasons_chart(REASONS_BY_PARTNER),
        lambda: charts.time_to_delivery_chart(DELIVERY_TIMES),
    ],
)
def test_charts_render_with_agg(draw: Callable[[], Figure]) -> None:
    """Every chart renders off-screen, with a title and no timestamp in it."""
    fig = draw()
    assert render_png(fig).startswith(b"\x89PNG")
    title = only_axes(fig).get_title()
    assert title
    assert not any(ch.isdigit() for ch in title)


@pytest.mark.parametrize(
    "draw",
    [
        lambda: charts.intent_mix_chart(MIX.iloc[:0]),
        lambda: charts.top_projects_chart(TOP.iloc[:0]),
        lambda: charts.message_length_chart(LENGTHS.iloc[:0]),
        lambda: charts.failure_reasons_chart(REASONS.iloc[:0]),
        lambda: charts.failure_reasons_chart(REASONS_BY_PARTNER.iloc[:0]),
        lambda: charts.latency_bands_chart(BANDS.iloc[:0, :2]),
        lambda: charts.time_to_delivery_chart(DELIVERY_TIMES.iloc[:0]),
    ],
)
def test_charts_of_nothing_are_empty(draw: Callable[[], Figure]) -> None:
    """Empty answers render with no bar of any area instead of failing."""
    fig = draw()
    assert render_png(fig).startswith(b"\x89PNG")
    areas = [bar.get_height() * bar.get_width() for bar in bars(only_axes(fig))]
    assert sum(areas) == 0.0


@pytest.mark.parametrize(("days", "step"), [(1, "D"), (3, "D"), (200, "W")])
def test_the_time_axis_fits_the_data_and_counts_start_at_zero(days: int, step: str) -> None:
    """The x axis spans the data's periods plus half a period each side; the y axis starts at 0."""
    start = pd.Timestamp("2026-06-29T10:00", tz="UTC")
    created = [start + pd.Timedelta(days=day) for day in range(days)] if days > 1 else [start] * 3
    frame = pd.DataFrame({"intent": ["claim"] * len(created), "created_at": pd.Series(created)})
    over_time = waitlist.registrations_over_time(frame)
    assert waitlist.time_step(frame["created_at"]) == step
    ax = only_axes(charts.registrations_over_time_chart(over_time))
    left, right = (mdates.num2date(limit) for limit in ax.get_xlim())
    width = pd.Timedelta(days=1 if step == "D" else 7)
    first, last = over_time["period"].iloc[0], over_time["period"].iloc[-1]
    assert (left, right) == (first - width / 2, last + width / 2)
    assert ax.get_ylim()[0] == 0
    assert ax.get_xlabel() == ("day (UTC)" if step == "D" else "week starting (UTC)")


def test_the_time_axis_names_utc_days_whatever_matplotlibs_time_zone() -> None:
    """Registrations on the UTC days 2026-05-11 and 2026-05-12 are labelled with those days under
    an "(UTC)" axis, even where matplotlib's settings name another time zone (its date formatter
    follows ``rcParams["timezone"]`` unless told)."""
    days = [pd.Timestamp("2026-05-11T10:00", tz="UTC"), pd.Timestamp("2026-05-12T10:00", tz="UTC")]
    frame = pd.DataFrame({"intent": ["claim", "claim"], "created_at": pd.Series(days)})
    with matplotlib.rc_context({"timezone": "America/Los_Angeles"}):
        fig = charts.registrations_over_time_chart(waitlist.registrations_over_time(frame))
        render_png(fig)  # lays the figure out, which writes the tick labels
        drawn = ticks(only_axes(fig).get_xticklabels())
    assert drawn == ["2026-05-11", "2026-05-12"]


def test_two_partners_of_one_long_name_keep_their_ids_apart_when_cut() -> None:
    """Two partners named alike are told apart by their ids after the name; cut at the end, both
    labels read "Lighthouse Analytics (ptn_01KRA…" and their bars look like twins. Those two are cut
    in the middle instead, keeping the id's end; a long label with no twin is cut at its end."""
    tails = ("8Z3Q5WJ4C0VDX9M2N7E6H1TGB", "9A0B1C2D3E4F5G6H7J8K9M0NP")
    twins = [f"Lighthouse Analytics (ptn_01KRA{tail})" for tail in tails]
    alone = "A partner whose name is long enough to be cut"
    rates = pd.DataFrame({"partner": [*twins, alone], "attempts": [4, 4, 4], "succeeded": [4, 3, 2],
                          "success_rate": [1.0, 0.75, 0.5]})  # fmt: skip
    fig = charts.success_rate_chart(rates)
    drawn = ticks(only_axes(fig).get_xticklabels())
    assert len(set(drawn)) == 3 and all(len(label) <= charts.MAX_LABEL for label in drawn)
    assert drawn[0] == "Lighthouse Anal…VDX9M2N7E6H1TGB)"
    assert drawn[1] == "Lighthouse Anal…4F5G6H7J8K9M0NP)"
    assert drawn[2] == alone[: charts.MAX_LABEL - 1].rstrip() + "…"


def test_a_long_name_is_cut_for_display_and_leaves_the_axes_their_room() -> None:
    """A project name of 117 characters (the service takes 120) is drawn cut, with an ellipsis, and
    the bars keep most of the figure's width; drawn in full, it squeezed the axes to nothing and
    constrained layout gave up, clipping every label. The frame keeps the name whole."""
    long_name = "The Extremely Long Decentralised Autonomous Organisation for Moonfrog Holders " * 2
    long_name = long_name[:117]
    top = pd.DataFrame({"project": [long_name, "zeta"], "count": [3, 1]})
    fig = charts.top_projects_chart(top)
    render_png(fig)  # lays the figure out
    ax = only_axes(fig)
    drawn = ticks(ax.get_yticklabels())
    assert drawn == [long_name[: charts.MAX_LABEL - 1].rstrip() + "…", "zeta"]
    assert all(len(label) <= charts.MAX_LABEL for label in drawn)
    assert ax.get_position().width > 0.5
    assert top["project"].iloc[0] == long_name


def many_reasons(count: int) -> pd.DataFrame:
    """Failure reasons for one partner: ``http_5NN`` answered ``count``, ``count - 1``, ... times."""
    codes = [500 + n for n in range(count)]
    attempts = list(range(count, 0, -1))
    total = sum(attempts) * 2
    return pd.DataFrame(
        {
            "partner_name": ["Acme"] * count,
            "error_class": [f"http_{code}" for code in codes],
            "status_code": pd.array(codes, dtype="Int64"),
            "attempts": attempts,
            "share": [n / total for n in attempts],
        }
    )


def test_failure_reasons_past_the_palette_share_one_other_colour() -> None:
    """Twelve reasons: the nine most frequent keep a colour each, the three rarest are drawn as one
    grey "other", so no two entries of the legend share a colour (the eleventh and twelfth took
    the first and second's); and the legend sits beside the bars, not over them."""
    reasons = many_reasons(12)
    ax = only_axes(charts.failure_reasons_chart(reasons))
    legend = ax.get_legend()
    assert legend is not None
    assert ticks(legend.get_texts()) == [f"http_{500 + n} / {500 + n}" for n in range(9)] + [
        "other (3 reasons)"
    ]
    colours = [tuple(handle.get_facecolor()) for handle in legend.legend_handles]  # type: ignore[union-attr]
    assert len(set(colours)) == len(colours) == 10
    assert widths(ax)[-1] == pytest.approx(reasons["share"].iloc[9:].sum())
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    fig.draw_without_rendering()  # lays the figure out
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1


def test_ten_reasons_name_the_one_left_over() -> None:
    """One reason past the nine colours is "other (1 reason)"; nine or fewer are all named."""
    legend = only_axes(charts.failure_reasons_chart(many_reasons(10))).get_legend()
    assert legend is not None and ticks(legend.get_texts())[-1] == "other (1 reason)"
    legend = only_axes(charts.failure_reasons_chart(many_reasons(9))).get_legend()
    assert legend is not None and "other" not in " ".join(ticks(legend.get_texts()))


def test_the_time_axis_is_named_by_the_periods_step() -> None:
    """Months (``freq="MS"``) read "month starting", where every step of a week or more read "week
    starting"; days and weeks keep their names. The step is the one the analysis took, or for a
    frame made elsewhere, the one between its periods."""
    created = pd.Series(pd.date_range("2026-01-05", "2026-05-20", freq="3D", tz="UTC"))
    frame = pd.DataFrame({"intent": "claim", "created_at": created})
    named = {}
    for freq in ("D", "W", "MS"):
        over_time = waitlist.registrations_over_time(frame, freq)
        made_elsewhere = over_time.copy()
        made_elsewhere.attrs.clear()
        named[freq] = [
            only_axes(charts.registrations_over_time_chart(drawn)).get_xlabel()
            for drawn in (over_time, made_elsewhere)
        ]
    assert named == {
        "D": ["day (UTC)"] * 2,
        "W": ["week starting (UTC)"] * 2,
        "MS": ["month starting (UTC)"] * 2,
    }


def test_a_single_month_is_named_a_month() -> None:
    """One period has no step to measure: the one the analysis took names it."""
    created = pd.Series(pd.to_datetime(["2026-03-02", "2026-03-20"], utc=True))
    over_time = waitlist.registrations_over_time(pd.DataFrame({"intent": "claim", "created_at": created}), "MS")
    assert len(over_time) == 1
    assert only_axes(charts.registrations_over_time_chart(over_time)).get_xlabel() == "month starting (UTC)"
