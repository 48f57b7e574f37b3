"""What a drill proved: its numbers, the problems it found, or why it was skipped."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any


class DrillDeadline(Exception):
    """A drill ran out of time before it could prove its point (a failure, not a skip)."""


@dataclass
class Report:
    drill: str
    backend: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    proved: list[str] = field(default_factory=list)  # one sentence per claim, with its numbers
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0

    @property
    def title(self) -> str:
        return f"{self.drill} [{self.backend}]" if self.backend else self.drill

    @property
    def ok(self) -> bool:
        return not self.problems

    def say(self, line: str) -> None:
        """Progress, as it happens (the drills run for a while)."""
        print(f"  [{time.monotonic() - self.started:5.1f} s] {self.title}: {line}", flush=True)

    def check(self, holds: bool, claim: str, problem: str | None = None) -> bool:
        """Record ``claim`` as proved, or ``problem`` (default: the claim, negated) as found."""
        if holds:
            self.proved.append(claim)
        else:
            self.problems.append(problem or f"NOT PROVED: {claim}")
        return holds

    def finish(self) -> Report:
        self.seconds = time.monotonic() - self.started
        return self

    def print(self, out: Any = None) -> None:
        out = out or sys.stdout
        if self.skipped:
            print(f"SKIP {self.title}: {self.skipped}", file=out, flush=True)
            return
        verdict = "PASS" if self.ok else "FAIL"
        print(f"{verdict} {self.title} ({self.seconds:.1f} s)", file=out)
        for name, value in self.numbers.items():
            print(f"    {name}: {value}", file=out)
        for claim in self.proved:
            print(f"    proved: {claim}", file=out)
        for problem in self.problems:
            print(f"    PROBLEM: {problem}", file=out)
        out.flush()


def skipped(drill: str, backend: str, reason: str) -> Report:
    return Report(drill, backend, skipped=reason).finish()
