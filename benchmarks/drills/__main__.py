"""``python -m benchmarks.drills [--short] [--only NAME ...] [--keep]``: run the drills, print what
each proved, exit 1 if any found a problem. Skipped parts (no PostgreSQL, no Redis) do not fail.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.drills import delivery, hostile, network, partners, ratelimit, registrations, stores
from benchmarks.drills.report import Report

Drill = Callable[[Path, bool], list[Report]]


def _registrations(workdir: Path, short: bool) -> list[Report]:
    plan = registrations.SHORT if short else registrations.FULL
    postgres = stores.postgres_url()
    return [registrations.run(kind, workdir, plan, postgres) for kind in ("sqlite", "postgresql")]


def _delivery(workdir: Path, short: bool) -> list[Report]:
    plan = delivery.SHORT if short else delivery.FULL
    postgres = stores.postgres_url()
    return [delivery.run(kind, workdir, plan, postgres) for kind in ("sqlite", "postgresql")]


def _hostile(workdir: Path, short: bool) -> list[Report]:
    return [hostile.run(workdir, hostile.SHORT if short else hostile.FULL)]


def _partners(workdir: Path, short: bool) -> list[Report]:
    plan = partners.SHORT if short else partners.FULL
    postgres = stores.postgres_url()
    return [partners.run(kind, workdir, plan, postgres) for kind in ("sqlite", "postgresql")]


def _ratelimit(workdir: Path, short: bool) -> list[Report]:
    return [ratelimit.run(workdir, ratelimit.SHORT if short else ratelimit.FULL, stores.redis_url())]


def _network(workdir: Path, short: bool) -> list[Report]:
    plan = network.SHORT if short else network.FULL
    return [network.run(workdir, plan, stores.postgres_url(), stores.redis_url())]


DRILLS: dict[str, Drill] = {
    "registrations": _registrations,
    "delivery": _delivery,
    "hostile": _hostile,
    "hostile partners": _partners,
    "ratelimit": _ratelimit,
    "network": _network,
}


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `with`, so children are killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.drills", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the test suite's short versions")
    parser.add_argument("--only", nargs="+", choices=sorted(DRILLS), help="run only these drills")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, SQLite files)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)

    workdir = Path(tempfile.mkdtemp(prefix="service-drills-"))
    print(f"drills ({'short' if args.short else 'full'}), work directory {workdir}", flush=True)
    print(f"PostgreSQL: {'yes' if stores.postgres_url() else stores.NO_POSTGRES}", flush=True)
    print(f"Redis: {'yes' if stores.redis_url() else stores.NO_REDIS}", flush=True)
    started = time.monotonic()
    reports: list[Report] = []
    for name in args.only or list(DRILLS):
        print(f"\n== {name}", flush=True)
        (workdir / name).mkdir()
        try:
            found = DRILLS[name](workdir / name, args.short)
        except Exception:  # a drill that crashes is a failed drill; the others still run
            crashed = Report(name)
            crashed.problems.append(f"crashed:\n{traceback.format_exc()}")
            found = [crashed.finish()]
        for report in found:
            report.print()
            reports.append(report)

    failed = [report for report in reports if not report.ok]
    print(f"\n== summary ({time.monotonic() - started:.0f} s)")
    for report in reports:
        verdict = "SKIP" if report.skipped else "PASS" if report.ok else "FAIL"
        print(
            f"{verdict} {report.title}"
            + (f": {report.skipped}" if report.skipped else f" ({report.seconds:.1f} s)")
        )
    if failed or args.keep:
        print(f"logs and databases kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
