"""The group commit below the registrations and the Redis limiter: batches, results, failures."""

from __future__ import annotations

import asyncio

import pytest

from service.db.batch import BatchWriter


def test_concurrent_submissions_share_flushes_and_each_gets_its_own_result() -> None:
    """Items that queue while a flush is out go together in the next one, each answered its own."""
    flushed: list[list[int]] = []

    async def play() -> list[int | None]:
        gate = asyncio.Event()

        async def double(items: list[int]) -> list[int]:
            flushed.append(items)
            await gate.wait()
            return [item * 2 for item in items]

        batch: BatchWriter[int, int] = BatchWriter(double)
        batch.start()
        first = asyncio.ensure_future(batch.submit(0))
        while not flushed:  # the first flush is out, held at the gate
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(batch.submit(n)) for n in range(1, 6)]
        await asyncio.sleep(0)
        gate.set()
        answers = await asyncio.gather(first, *rest)
        await batch.close()
        return list(answers)

    assert asyncio.run(play()) == [0, 2, 4, 6, 8, 10]
    assert flushed == [[0], [1, 2, 3, 4, 5]]


def test_a_flush_without_results_answers_none() -> None:
    async def store(items: list[str]) -> None:
        return None

    async def play() -> list[None]:
        batch: BatchWriter[str, None] = BatchWriter(store)
        batch.start()
        answers = await asyncio.gather(batch.submit("a"), batch.submit("b"))
        await batch.close()
        return list(answers)

    assert asyncio.run(play()) == [None, None]


def test_one_failing_item_fails_alone_and_its_neighbours_are_flushed_again() -> None:
    calls: list[list[str]] = []

    async def refuse_bad(items: list[str]) -> list[str]:
        calls.append(items)
        if "bad" in items:
            raise ValueError("refused")
        return [item.upper() for item in items]

    async def play() -> list[object]:
        batch: BatchWriter[str, str] = BatchWriter(refuse_bad)
        batch.start()
        answers = await asyncio.gather(
            batch.submit("first"), batch.submit("a"), batch.submit("bad"), batch.submit("b"),
            return_exceptions=True,
        )  # fmt: skip
        await batch.close()
        return list(answers)

    first, a, bad, b = asyncio.run(play())
    assert (first, a, b) == ("FIRST", "A", "B")
    assert isinstance(bad, ValueError)
    assert calls == [["first", "a", "bad", "b"], ["first"], ["a"], ["bad"], ["b"]]


def test_nothing_is_accepted_once_closing() -> None:
    async def play() -> None:
        batch: BatchWriter[int, None] = BatchWriter(lambda items: asyncio.sleep(0))
        batch.start()
        await batch.close()
        await batch.submit(1)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(play())
