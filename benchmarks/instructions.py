"""Instructions a delivery, counted by callgrind: the worker against a plain aiohttp client.

Throughput on a shared machine moves from run to run by more than most single changes to the
worker are worth. Instructions do not: valgrind's callgrind counts what the process executes,
whatever else the machine is doing. This runs each part in a process of its own under callgrind,
counting only its measured phase (setup and imports are not counted), beside a receiver and a
database that run at full speed outside it:

- **plain**: a bare aiohttp client posts N prepared requests (the bodies and headers the service
  would send) at C connections, as ``benchmarks.delivery``'s plain client does;
- **send**: the service's ``Sender`` posts N bodies at C at once, signing each (no database);
- **drain**: the worker drains a backlog of N deliveries for one partner at cap C, as ``serve``
  runs it (its default concurrency): claim, sign, POST, log every attempt durably.

    python -m benchmarks.instructions [--count 2000] [--concurrency 16] [--parts plain send drain]
                                      [--database-url postgresql://user@host/db] [--objects]
                                      [--bytecodes [--top N] | --cpu [--rounds 3]]

It prints each part's instructions a message and their ratio to the plain client's. On PostgreSQL
the drain counts the worker's process only (the database's work is another process's, on another
core); on SQLite it counts SQLite too. ``--objects`` breaks each part down by the shared object the
instructions ran in (the interpreter, uvloop, aiohttp's parser, asyncpg, libc...).

``--bytecodes`` says which Python code the instructions went to, which callgrind cannot: with no
valgrind, it counts the interpreter's bytecodes a message in each function over the same measured
phase (``sys.settrace`` opcode events), and prints them by package or module and the functions
that run the most (``--top N`` of each, 15 by default). Traced, the process runs some hundred
times slower, so the drain's turns are smaller still.

``--cpu`` runs each part at full speed instead, in a process of its own, and reads the CPU time
and the wall-clock time of its measured phase: CPU a message, messages a second, and how much of
the phase the process was running (the rest it waited: for a core, for the receiver, for the
database; on SQLite the database's thread runs in it too). The parts alternate for ``--rounds``
rounds and the medians are printed, with each part's rate against the plain client's. It answers
how much of the gap between the plain client and the drain the sender alone (signing, its checks
on the answer) holds, and how much the claims and the log add, in time rather than instructions.

Under callgrind the measured process runs some fifty times slower while the receiver and the
database do not, so the worker's turns are shorter and more numerous than at full speed; the drain
says how many it committed. Compare drains with similar turns a delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from benchmarks.delivery import (
    PLAIN_SECRET,
    ROOT,
    _now,
    backlog,
    bench_settings,
    drain_backlog,
    event,
    plain,
    plain_requests,
    receiver,
    setup,
)

PARTS = ("plain", "send", "drain")
WARM = 200  # messages each part sends before counting starts: connections open, caches warm


def _callgrind(command: str) -> None:
    """Ask the callgrind running this process to do ``command`` (``-i on``, ``-d``...)."""
    subprocess.run(["callgrind_control", *command.split(), str(os.getpid())], check=True, capture_output=True)


class Counting:
    """Callgrind's counting, on for the measured phase only (the process starts with it off)."""

    def __enter__(self) -> Counting:
        _callgrind("-i on")
        return self

    def __exit__(self, *exc: object) -> None:
        _callgrind("-d")
        _callgrind("-i off")


class Bytecodes:
    """The interpreter's bytecodes by function over the measured phase (opcode trace events)."""

    def __init__(self) -> None:
        self.counts: Counter[CodeType] = Counter()

    def _trace(self, frame: FrameType, event: str, arg: object) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.counts[frame.f_code] += 1
        return self._trace

    def __enter__(self) -> Bytecodes:
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)

    def report(self, count: int, top: int = 15) -> list[str]:
        """Bytecodes a message in all, by where the code lives, and in the busiest functions."""
        places: Counter[str] = Counter()
        functions: Counter[str] = Counter()
        for code, ran in self.counts.items():
            place = _place(code.co_filename)
            places[place] += ran
            functions[f"{_file(code.co_filename)}:{code.co_firstlineno} {code.co_name}"] += ran
        lines = [f"{sum(self.counts.values()) / count:10,.0f}  bytecodes a message"]
        lines += [f"{ran / count:10,.1f}  {place}" for place, ran in places.most_common(top)]
        lines.append("            the busiest functions:")
        lines += [f"{ran / count:10,.1f}  {name}" for name, ran in functions.most_common(top)]
        return lines


class CpuTime:
    """This process's CPU time and the wall-clock time over the measured phase."""

    cpu = wall = 0.0

    def __enter__(self) -> CpuTime:
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu, self.wall = time.process_time() - self._cpu, time.perf_counter() - self._wall


def _file(filename: str) -> str:
    """A source file named from its package (``aiohttp/client.py``), this project
    (``service/webhooks/send.py``) or the standard library (``asyncio/queues.py``, ``hmac.py``)."""
    path = Path(filename)
    if path.is_relative_to(ROOT) and "site-packages" not in path.parts:
        return str(path.relative_to(ROOT))
    for root in ("site-packages", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        if root in path.parts:
            return "/".join(path.parts[path.parts.index(root) + 1 :])
    return filename  # <frozen abc>, <string> (named tuples' generated code)


def _place(filename: str) -> str:
    """Where code lives: a package or a module of the standard library (``aiohttp``, ``asyncio``,
    ``hmac``), or a file of this project (``service/webhooks/send.py``)."""
    named = _file(filename)
    if Path(filename).is_relative_to(ROOT) and "site-packages" not in Path(filename).parts:
        return named
    return named.split("/", 1)[0].removesuffix(".py")


Meter = Callable[[], AbstractContextManager[object]]


# --- the parts, each run in the process callgrind counts ----------------------------------------


async def measure_plain(base: str, count: int, concurrency: int, meter: Meter) -> str:
    requests = plain_requests(count + WARM)
    await plain(base, requests[:WARM], concurrency)
    with meter():
        await plain(base, requests[WARM:], concurrency)
    return f"{count} posts"


async def measure_send(base: str, count: int, concurrency: int, database_url: str, meter: Meter) -> str:
    from service.events import parse_event
    from service.webhooks import wiring
    from service.webhooks.outbox import encode_payload, new_delivery_id

    settings = bench_settings(database_url)
    # Made before counting, as the worker's come from its claims: each delivery's id and body.
    deliveries = [
        (new_delivery_id(), encode_payload(parse_event(event(i, "send"), now=_now())).encode())
        for i in range(count + WARM)
    ]
    sender = wiring.sender(settings, clock=_now, limit=concurrency, limit_per_host=0)  # type: ignore[arg-type]
    url, secrets = f"{base}/hook", (PLAIN_SECRET,)

    async def post(chunk: list[tuple[str, bytes]]) -> None:
        items = iter(chunk)

        async def one_connection() -> None:
            for delivery_id, body in items:
                attempt = await sender.send(
                    url=url, event="room.trending", delivery_id=delivery_id, body=body, secrets=secrets
                )
                assert attempt.status_code == 200, attempt

        await asyncio.gather(*(one_connection() for _ in range(concurrency)))

    async with sender:
        await post(deliveries[:WARM])
        with meter():
            await post(deliveries[WARM:])
    return f"{count} sends"


async def measure_drain(base: str, count: int, concurrency: int, database_url: str, meter: Meter) -> str:
    from sqlalchemy import event as orm_event

    from service.db.tables import partners

    engine, settings = await setup(database_url, base)
    commits = [0]
    try:
        async with engine.begin() as conn:  # type: ignore[attr-defined]
            await conn.execute(partners.update().values(max_in_flight=concurrency))
        await backlog(engine, WARM, prefix="warm")
        await drain_backlog(engine, settings, WARM, None)
        await backlog(engine, count, prefix="count")

        def committed(conn: object) -> None:
            commits[0] += 1

        orm_event.listen(engine.sync_engine, "commit", committed)  # type: ignore[attr-defined]
        with meter():
            await drain_backlog(engine, settings, count, None)
    finally:
        await engine.dispose()  # type: ignore[attr-defined]
    return f"{count} deliveries in {commits[0]} turns"


def measure(
    part: str,
    base: str,
    count: int,
    concurrency: int,
    database_url: str,
    bytecodes: bool,
    top: int = 15,
    cpu: bool = False,
) -> int:
    """One part in this process: counted by the callgrind running it or, with ``bytecodes``, traced,
    or with ``cpu``, timed."""
    from service import collector, eventloop

    collector.tune()
    traced, timed = Bytecodes(), CpuTime()
    meter: Meter = (lambda: traced) if bytecodes else (lambda: timed) if cpu else Counting
    if part == "plain":
        run = measure_plain(base, count, concurrency, meter)
    elif part == "send":
        run = measure_send(base, count, concurrency, database_url, meter)
    else:
        run = measure_drain(base, count, concurrency, database_url, meter)

    async def main() -> int:
        print(await run)
        if bytecodes:
            print("\n".join(traced.report(count, top)))
        if cpu:
            print(f"cpu {timed.cpu!r} wall {timed.wall!r}")
        return 0

    return eventloop.run(main())


# --- the driver ---------------------------------------------------------------------------------


def counted(out: Path) -> tuple[int, Counter[str]]:
    """The instructions in a callgrind dump, in all and by shared object (self cost)."""
    objects: dict[str, str] = {}
    by_object: Counter[str] = Counter()
    current = "?"
    skip = False
    total = 0
    with out.open() as lines:
        for line in lines:
            if line.startswith("ob="):
                current = _named(objects, line[3:].strip())
            elif line.startswith("cob="):
                _named(objects, line[4:].strip())
            elif line.startswith("calls="):
                skip = True  # the next line is the call's inclusive cost, not this function's
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip:
                    skip = False
                    continue
                cost = int(line.split()[-1])
                by_object[current] += cost
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    return total, by_object


def _named(objects: dict[str, str], spec: str) -> str:
    """Callgrind names an object once in full, ``(3) /usr/lib/x.so``, then by its number, ``(3)``."""
    match = re.match(r"\((\d+)\)(?: (.*))?", spec)
    if match is None:
        return spec
    number, name = match.groups()
    if name:
        objects[number] = Path(name).name
    return objects.get(number, spec)


def _measured(part: str, base: str, args: argparse.Namespace, database_url: str, *, under: list[str],
              bytecodes: bool = False, cpu: bool = False) -> list[str]:  # fmt: skip
    """Run ``part`` in a process of its own (``under`` callgrind, traced or timed): what it printed."""
    python = str(Path(sys.executable).absolute())  # the venv's, so its packages come along
    command = [
        *under, python, "-m", "benchmarks.instructions", "--measure", part, "--base", base,
        "--count", str(args.count), "--concurrency", str(args.concurrency), "--database-url", database_url,
        *(["--bytecodes", "--top", str(args.top)] if bytecodes else []), *(["--cpu"] if cpu else []),
    ]  # fmt: skip
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if finished.returncode:
        raise RuntimeError(f"{part} failed:\n{finished.stdout}\n{finished.stderr}")
    return finished.stdout.strip().splitlines()


def run_part(
    part: str, base: str, args: argparse.Namespace, database_url: str, scratch: Path
) -> tuple[int, str, Counter[str]]:
    """One part under callgrind: its instructions, what it said it did, and its instructions by object."""
    out = scratch / f"{part}.out"
    callgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    printed = _measured(part, base, args, database_url, under=callgrind)
    dumps = sorted(scratch.glob(f"{part}.out.*"))
    if len(dumps) != 1:
        raise RuntimeError(f"{part}: expected one dump of the measured phase, found {len(dumps)}")
    total, by_object = counted(dumps[0])
    return total, printed[-1], by_object


def traced_parts(args: argparse.Namespace) -> int:
    """Each part in a process of its own, its bytecodes a message counted by tracing."""
    from benchmarks.servers import free_port

    with tempfile.TemporaryDirectory() as scratch, receiver(free_port()) as base:
        database_url = args.database_url or f"sqlite:///{Path(scratch) / 'bench.db'}"
        print(f"bytecodes a message, traced: {args.count} messages at {args.concurrency} connections")
        for part in args.parts:
            what, *report = _measured(part, base, args, database_url, under=[], bytecodes=True)
            print(f"  {part} ({what})")
            print("\n".join(report))
    return 0


def timed_parts(args: argparse.Namespace) -> int:
    """Each part at full speed in a process of its own, the parts alternating for ``args.rounds``
    rounds: the medians of CPU a message, messages a second and the share of the phase running."""
    from benchmarks.servers import free_port

    timed: dict[str, list[tuple[float, float]]] = {part: [] for part in args.parts}
    with tempfile.TemporaryDirectory() as scratch, receiver(free_port()) as base:
        database_url = args.database_url or f"sqlite:///{Path(scratch) / 'bench.db'}"
        backend = "PostgreSQL" if database_url.startswith("postgres") else "SQLite"
        for _ in range(args.rounds):
            for part in args.parts:
                *_, last = _measured(part, base, args, database_url, under=[], cpu=True)
                _, cpu, _, wall = last.split()
                timed[part].append((float(cpu), float(wall)))
    print(f"CPU a message at full speed: {args.count} messages at {args.concurrency} connections (the drain: "
          f"one partner at cap {args.concurrency}, {backend}), medians of {args.rounds} rounds")  # fmt: skip
    plain_rate = None
    for part, rounds in timed.items():
        each = statistics.median(cpu for cpu, _ in rounds) / args.count
        rate = statistics.median(args.count / wall for _, wall in rounds)
        running = statistics.median(cpu / wall for cpu, wall in rounds)
        plain_rate = rate if part == "plain" else plain_rate
        ratio = f", {part} ÷ plain {rate / plain_rate:4.2f}" if plain_rate and part != "plain" else ""
        print(f"  {part:6s} {each * 1e6:6.0f} µs CPU a message, {rate:8,.0f}/s{ratio}; "
              f"running {running:.0%} of the time")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--count", type=int, default=2000, help="messages each part counts")
    parser.add_argument("--concurrency", type=int, default=16, help="connections, and the partner's cap")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--objects", action="store_true", help="each part by shared object")
    parser.add_argument(
        "--bytecodes", action="store_true",
        help="instead: the interpreter's bytecodes a message, by package and function (no valgrind)",
    )  # fmt: skip
    parser.add_argument(
        "--top", type=int, default=15, help="with --bytecodes: how many places and functions each part lists"
    )
    parser.add_argument(
        "--cpu", action="store_true",
        help="instead: each part at full speed, its CPU a message and messages a second (no valgrind)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="with --cpu: rounds, the parts alternating")
    parser.add_argument("--measure", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(args.measure, args.base, args.count, args.concurrency, args.database_url,
                       args.bytecodes, args.top, args.cpu)  # fmt: skip
    if args.bytecodes:
        return traced_parts(args)
    if args.cpu:
        return timed_parts(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    from benchmarks.servers import free_port

    with tempfile.TemporaryDirectory() as scratch, receiver(free_port()) as base:
        database_url = args.database_url or f"sqlite:///{Path(scratch) / 'bench.db'}"
        backend = "PostgreSQL" if database_url.startswith("postgres") else "SQLite"
        print(f"instructions a message, counted by callgrind: {args.count} messages at {args.concurrency} "
              f"connections (the drain: one partner at cap {args.concurrency}, {backend})")  # fmt: skip
        plain_each = None
        for part in args.parts:
            began = time.monotonic()
            total, what, by_object = run_part(part, base, args, database_url, Path(scratch))
            each = total / args.count
            plain_each = each if part == "plain" else plain_each
            ratio = f", plain ÷ {part} {plain_each / each:4.2f}" if plain_each and part != "plain" else ""
            print(f"  {part:6s} {each / 1000:8.1f} k instructions a message{ratio} ({what}; "
                  f"{time.monotonic() - began:.0f} s under callgrind)")  # fmt: skip
            if args.objects:
                for name, cost in by_object.most_common(12):
                    print(f"           {cost / args.count / 1000:8.1f} k  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
