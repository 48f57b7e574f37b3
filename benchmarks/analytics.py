"""How the waitlist analyses grow: time and peak memory for 10^4, 10^5 and 10^6 registrations.

    python -m benchmarks.analytics [--sizes 10000,100000,1000000] [--keep DIR]

For each size, registrations shaped like the demo's (its projects, messages and intent mix, some
people under two or three intents) are bulk-inserted into a SQLite file with the service's schema,
and a fresh child process then loads them (``load.load_registrations``) and summarises them
(``waitlist.intent_mix``, ``registrations_over_time``, ``top_projects``, ``message_lengths``,
``repeat_registrations``).
The child reports the seconds each step took and its peak resident memory, so each size's memory
is its own and not the high-water mark of the size before it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from service.db import tables
from service.demo import scenario

SIZES = (10_000, 100_000, 1_000_000)
SEED = 1
STEPS = ("load", "intent_mix", "over_time", "top_projects", "message_lengths", "repeats")
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DateTime in SQLite


def registration_rows(count: int, seed: int = SEED) -> Iterator[tuple[Any, ...]]:
    """``count`` registration rows in insertion order, unique per (address, intent)."""
    rng = random.Random(seed)
    span = scenario.DAYS * 86_400
    offsets = sorted(rng.randrange(span) for _ in range(count))
    intents, weights = zip(*scenario.INTENT_WEIGHTS.items(), strict=True)
    domains = [domain for domain, _ in scenario.DOMAINS]
    people: deque[tuple[str, set[str]]] = deque(maxlen=1000)  # who may come back: the recent ones
    for serial, offset in enumerate(offsets):
        intent = rng.choices(intents, weights=weights)[0]
        person = rng.choice(people) if people and rng.random() < scenario.RETURNING_SHARE else None
        if person is None or intent in person[1]:
            first, last = rng.choice(scenario.FIRST_NAMES), rng.choice(scenario.LAST_NAMES)
            person = (f"{first}.{last}{serial}@{rng.choice(domains)}", set())
            people.append(person)
        email, taken = person
        taken.add(intent)
        project = scenario.project_text(rng) if rng.random() < scenario.PROJECT_SHARE[intent] else None
        wrote = rng.random() < scenario.MESSAGE_SHARE[intent]
        message = scenario.message_text(rng, project) if wrote else None
        at = (scenario.START + timedelta(seconds=offset)).strftime(SQLITE_TIME)
        yield (email, email.lower(), intent, project, message, at, at)


def write_database(path: Path, count: int) -> None:
    """The service's schema, then ``count`` rows in one bulk insert with journaling off."""
    engine = create_engine(f"sqlite:///{path}")
    tables.metadata.create_all(engine)
    engine.dispose()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=OFF")  # a throwaway file: speed over safety
        conn.execute("PRAGMA synchronous=OFF")
        conn.executemany(
            "INSERT INTO registrations (email, email_key, intent, project, message, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            registration_rows(count),
        )
        conn.commit()


def peak_rss_mib() -> float:
    """This process's peak resident memory so far.

    Linux's VmHWM belongs to the process image, so it starts afresh at exec; ``ru_maxrss`` does
    not, and a child would report the parent's high-water mark.
    """
    with contextlib.suppress(OSError), open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux and BSD


def measure(path: Path) -> dict[str, float]:
    """In this process: seconds per step, and peak resident memory before and after (MiB)."""
    from analytics import load, waitlist

    before = peak_rss_mib()
    timings: dict[str, float] = {}
    frame = None

    def step(name: str, run: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        result = run()
        timings[name] = time.perf_counter() - began
        return result

    frame = step("load", lambda: load.load_registrations(path))
    step("intent_mix", lambda: waitlist.intent_mix(frame))
    step("over_time", lambda: waitlist.registrations_over_time(frame))
    step("top_projects", lambda: waitlist.top_projects(frame))
    step("message_lengths", lambda: waitlist.message_lengths(frame))
    step("repeats", lambda: waitlist.repeat_registrations(frame))
    after = peak_rss_mib()
    return {**timings, "rows": float(len(frame)), "rss_start": before, "rss_peak": after}


def run_child(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.analytics", "--child", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def table(results: list[tuple[int, float, float, dict[str, float]]]) -> str:
    steps = [f"{name} s" for name in STEPS]
    header = ["rows", "file MB", "write s", *steps, "total s", "µs/row", "peak MiB", "+MiB"]
    lines = [header]
    for count, size, written, result in results:
        total = sum(result[name] for name in STEPS)
        lines.append(
            [
                f"{count:,}",
                f"{size:.1f}",
                f"{written:.1f}",
                *(f"{result[name]:.3f}" for name in STEPS),
                f"{total:.2f}",
                f"{total / count * 1e6:.1f}",
                f"{result['rss_peak']:.0f}",
                f"{result['rss_peak'] - result['rss_start']:.0f}",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in lines
    )


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.analytics", description=summary)
    parser.add_argument("--sizes", default=",".join(str(size) for size in SIZES))
    parser.add_argument("--keep", type=Path, help="write the databases here and keep them")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child)))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        results = []
        for count in sizes:
            path = folder / f"registrations-{count}.db"
            path.unlink(missing_ok=True)
            began = time.perf_counter()
            write_database(path, count)
            written = time.perf_counter() - began
            result = run_child(path)
            if int(result["rows"]) != count:
                raise RuntimeError(f"wrote {count} rows, loaded {result['rows']:.0f}")
            results.append((count, path.stat().st_size / 1e6, written, result))
            print(f"{count:,} rows done", file=sys.stderr)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
