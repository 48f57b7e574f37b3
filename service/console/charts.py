"""Bar charts as plain data for inline SVG: each bar a rectangle with a title, drawn by a template.

Pages show the same numbers in a table beside each chart, so a chart is never the only way to
read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WIDTH = 480  # the SVG's own units; CSS scales it to the column
HEIGHT = 120
GAP = 2


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str
    kind: str = ""  # a CSS class: the outcome a stacked segment stands for


def bars(values: Sequence[tuple[str, int]], *, width: int = WIDTH, height: int = HEIGHT) -> list[Bar]:
    """One bar per (label, value), scaled to the largest value."""
    if not values:
        return []
    top = max(max(value for _, value in values), 1)
    step = width / len(values)
    return [
        Bar(
            x=round(index * step + GAP / 2, 2),
            y=round(height - value / top * height, 2),
            width=round(step - GAP, 2),
            height=round(value / top * height, 2),
            title=f"{label}: {value}",
        )
        for index, (label, value) in enumerate(values)
    ]


def stacked(
    columns: Sequence[tuple[str, Mapping[str, int]]], *, width: int = WIDTH, height: int = HEIGHT
) -> list[Bar]:
    """One column per (label, counts), each count a segment stacked on the ones before it."""
    if not columns:
        return []
    top = max(max((sum(counts.values()) for _, counts in columns), default=0), 1)
    step = width / len(columns)
    drawn: list[Bar] = []
    for index, (label, counts) in enumerate(columns):
        base = float(height)
        for kind, value in counts.items():
            if not value:
                continue
            size = value / top * height
            base -= size
            drawn.append(
                Bar(
                    x=round(index * step + GAP / 2, 2),
                    y=round(base, 2),
                    width=round(step - GAP, 2),
                    height=round(size, 2),
                    title=f"{label}: {value} {kind}",
                    kind=kind,
                )
            )
    return drawn
