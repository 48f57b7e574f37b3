"""What a partner's answer costs the worker: the ``Sender``'s CPU an attempt, by the answer's shape.

    python -m benchmarks.answers [--attempts 300] [--rounds 4] [--chunks 20000]

A partner in a process of its own answers every POST the same way, on a kept-alive connection:

- **plain**: ``200 OK`` with a body of two bytes, as most receivers answer;
- **chunks**: ``200 OK`` with a chunked body of ``--chunks`` chunks of one byte each (a partner
  flushing byte by byte, or one spending the worker's CPU on purpose);
- **page**: ``200 OK`` with a body of 16 KB in one piece (a web framework's HTML page);
- **large**: ``200 OK`` with a body of 120 KB in one piece.

The ``Sender`` (signing both schemes, as the worker sends) posts ``--attempts`` deliveries to each
in turn, and the CPU time of this process is read around them: µs an attempt. Two senders run side
by side, alternating for ``--rounds``: the service's own, and the same one reading as far as
aiohttp's default buffer (256 KiB, 16,384 chunks) before it stops reading a connection, the
baseline. ``--buffer`` tries another size on the service's side. Printed: the medians, and each
answer's cost against a plain answer's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from benchmarks.servers import HOST, free_port
from service.webhooks import send

SECRET = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # noqa: S105 - a bench key
AIOHTTP_DEFAULT_BUFFER = 2**18  # aiohttp 3.14's read_bufsize when none is given


def answers(chunks: int) -> dict[str, bytes]:
    chunked = b"".join(
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\nx\r\n" * chunks, b"0\r\n\r\n"]
    )
    page = b"HTTP/1.1 200 OK\r\nContent-Length: 16000\r\n\r\n" + b"x" * 16_000
    large = b"HTTP/1.1 200 OK\r\nContent-Length: 120000\r\n\r\n" + b"x" * 120_000
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    return {"plain": plain, "chunks": chunked, "page": page, "large": large}


def _partner(port: int, answer: bytes) -> None:
    """Answer every request on every connection with ``answer``, for ever."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()
        writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, HOST, port)
        await server.serve_forever()

    asyncio.run(serve())


@contextlib.contextmanager
def partners(shapes: dict[str, bytes]) -> Iterator[dict[str, str]]:
    """Each shape's partner in a process of its own; their URLs."""
    ports = {name: free_port() for name in shapes}
    processes = [
        multiprocessing.Process(target=_partner, args=(ports[name], answer), daemon=True)
        for name, answer in shapes.items()
    ]
    for process in processes:
        process.start()
    try:
        yield {name: f"http://{HOST}:{port}/hook" for name, port in ports.items()}
    finally:
        for process in processes:
            process.terminate()
            process.join(5)


async def cpu_an_attempt(url: str, attempts: int, buffer: int) -> float:
    """µs of this process's CPU an attempt, for ``attempts`` sent one after another to ``url`` by a
    ``Sender`` that buffers ``buffer`` bytes of an answer's body."""
    held, send._BODY_BUFFER = send._BODY_BUFFER, buffer
    try:
        async with send.Sender(timeout=10, allow_private=True, clock=lambda: datetime.now(UTC)) as sender:
            await sender.send(url=url, event="room.claimed", delivery_id="warm", body=b"{}", secrets=[SECRET])
            began = time.process_time()
            for number in range(attempts):
                attempt = await sender.send(
                    url=url, event="room.claimed", delivery_id=f"d{number}", body=b"{}", secrets=[SECRET]
                )
                assert attempt.status_code == 200, attempt
            return (time.process_time() - began) / attempts * 1e6
    finally:
        send._BODY_BUFFER = held


async def measure(args: argparse.Namespace) -> None:
    sides = {"service": args.buffer or send._BODY_BUFFER, "baseline": AIOHTTP_DEFAULT_BUFFER}
    shapes = answers(args.chunks)
    seen: dict[tuple[str, str], list[float]] = {(side, shape): [] for side in sides for shape in shapes}
    with partners(shapes) as urls:
        await asyncio.sleep(0.5)  # the partners bind their ports
        for number in range(args.rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for side in order:
                for shape, url in urls.items():
                    seen[side, shape].append(await cpu_an_attempt(url, args.attempts, sides[side]))
    print(f"the Sender's CPU an attempt (µs, medians of {args.rounds} rounds of {args.attempts} attempts), "
          f"by the partner's answer ({args.chunks:,} one-byte chunks for 'chunks')")  # fmt: skip
    for side, buffer in sides.items():
        cost = {shape: statistics.median(seen[side, shape]) for shape in shapes}
        plain = cost["plain"]
        costs = ", ".join(f"{shape} {cost[shape]:7.0f} ({cost[shape] / plain:5.1f}x)" for shape in cost)
        print(f"  {side:8} (body buffer {buffer:>7,} bytes): {costs}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.answers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--attempts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--buffer", type=int, default=0, help="the service side's body buffer (bytes)")
    asyncio.run(measure(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
