"""The one table every benchmark prints: a row per scenario, as aligned text or as Markdown.

Numbers a scenario does not have (latency of a backlog drain, a baseline for a delivery's latency)
print as ``-``; a note on a row prints as a numbered footnote under the table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.compare import Measured

COLUMNS = (
    "scenario",
    "storage",
    "workers",
    "req/s",
    "p50 ms",
    "p99 ms",
    "baseline req/s",
    "ratio",
    "CPU us/req",
    "baseline CPU us/req",
    "peak RSS MiB",
)
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    storage: str
    workers: str
    rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    baseline_rps: float | None = None
    ratio: float | None = None
    cpu_us: float | None = None
    baseline_cpu_us: float | None = None
    peak_mib: float | None = None
    note: str = ""

    @classmethod
    def compare(
        cls, scenario: str, storage: str, workers: str, service: Measured, baseline: Measured, note: str = ""
    ) -> Row:
        return cls(
            scenario=scenario,
            storage=storage,
            workers=workers,
            rps=service.rps,
            p50_ms=service.p50_ms,
            p99_ms=service.p99_ms,
            baseline_rps=baseline.rps,
            ratio=service.rps / baseline.rps if baseline.rps else None,
            cpu_us=service.cpu_us,
            baseline_cpu_us=baseline.cpu_us,
            peak_mib=service.peak_rss / _MIB if service.peak_rss is not None else None,
            note=note,
        )

    def cells(self) -> list[str]:
        return [
            self.scenario,
            self.storage,
            self.workers,
            _number(self.rps, "{:,.0f}"),
            _number(self.p50_ms, "{:.2f}"),
            _number(self.p99_ms, "{:.2f}"),
            _number(self.baseline_rps, "{:,.0f}"),
            _number(self.ratio, "{:.2f}"),
            _number(self.cpu_us, "{:.0f}"),
            _number(self.baseline_cpu_us, "{:.0f}"),
            _number(self.peak_mib, "{:.0f}"),
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def render(rows: list[Row], *, markdown: bool = False) -> str:
    """The table, then a numbered footnote for each different note (marked on its rows)."""
    notes: dict[str, int] = {}  # the same note on several rows prints once
    table: list[list[str]] = []
    for row in rows:
        cells = row.cells()
        if row.note:
            cells[0] += f" [{notes.setdefault(row.note, len(notes) + 1)}]"
        table.append(cells)
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(_align(c) for c in COLUMNS) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in table]
    else:
        widths = [max([len(c), *(len(cells[i]) for cells in table)]) for i, c in enumerate(COLUMNS)]
        lines = ["  ".join(_pad(c, w, i) for i, (c, w) in enumerate(zip(COLUMNS, widths, strict=True)))]
        lines.append("  ".join("-" * w for w in widths))
        for cells in table:
            lines.append("  ".join(_pad(c, w, i) for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    if notes:
        lines.append("")
        lines += [f"[{number}] {note}" for note, number in notes.items()]
    return "\n".join(lines)


def _align(column: str) -> str:
    return "---" if column in COLUMNS[:3] else "---:"


def _pad(text: str, width: int, index: int) -> str:
    return text.ljust(width) if index < 3 else text.rjust(width)


def parse_markdown(text: str) -> list[dict[str, str]]:
    """The rows of a table ``render(..., markdown=True)`` printed, keyed by column (for tests)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return []
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]
