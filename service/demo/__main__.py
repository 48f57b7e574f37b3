"""``python -m service.demo --out var/demo.db [--seed N] [--force]``: make the demo database."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from service.demo import files, scenario


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.demo", description="Make the seeded demo database by driving the service."
    )
    parser.add_argument("--out", type=Path, default=files.DEMO_PATH, help=f"default {files.DEMO_PATH}")
    parser.add_argument("--seed", type=int, default=scenario.DEFAULT_SEED)
    parser.add_argument("--force", action="store_true", help="make it again even if it is up to date")
    args = parser.parse_args(argv)
    if not args.force and files.user_version(args.out) == files.fingerprint(args.seed):
        print(f"{args.out} is up to date (seed {args.seed})")
        return 0
    began = time.perf_counter()
    summary = files.write(args.out, args.seed)
    print(f"wrote {args.out} in {time.perf_counter() - began:.1f} s: {summary.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
