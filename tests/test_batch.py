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
    """An error ``split`` says may be one item's fault: each item is flushed again on its own."""
    calls: list[list[str]] = []

    async def refuse_bad(items: list[str]) -> list[str]:
        calls.append(items)
        if "bad" in items:
            raise ValueError("refused")
        return [item.upper() for item in items]

    async def play() -> list[object]:
        batch: BatchWriter[str, str] = BatchWriter(refuse_bad, split=lambda error: isinstance(error, ValueError))
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


def test_an_unreachable_store_fails_the_whole_batch_at_once_with_one_log_line(caplog) -> None:
    """Any other error is not retried item by item: one flush, every caller told, one warning."""
    calls: list[list[int]] = []

    async def unreachable(items: list[int]) -> None:
        calls.append(items)
        raise ConnectionRefusedError("no database")

    async def play() -> list[object]:
        batch: BatchWriter[int, None] = BatchWriter(
            unreachable, split=lambda error: isinstance(error, ValueError), name="test batch"
        )
        batch.start()
        answers = await asyncio.gather(*(batch.submit(n) for n in range(4)), return_exceptions=True)
        await batch.close()
        return list(answers)

    answers = asyncio.run(play())
    assert calls == [[0, 1, 2, 3]]
    assert all(isinstance(answer, ConnectionRefusedError) for answer in answers)
    assert [record.getMessage() for record in caplog.records if record.name == "service.db.batch"] == [
        "test batch failed"
    ]


def test_the_registration_writer_splits_only_on_refused_rows() -> None:
    """A constraint or a value is one row's fault; a connection, a timeout or a lock is everyone's."""
    import sqlite3

    import asyncpg.exceptions

    from service.db.writer import refused_rows

    assert refused_rows(sqlite3.IntegrityError("NOT NULL constraint failed"))
    assert refused_rows(asyncpg.exceptions.NotNullViolationError("null value"))
    assert refused_rows(asyncpg.exceptions.StringDataRightTruncationError("value too long"))
    assert not refused_rows(sqlite3.OperationalError("database is locked"))
    assert not refused_rows(ConnectionRefusedError())
    assert not refused_rows(TimeoutError())
    assert not refused_rows(asyncpg.exceptions.ConnectionDoesNotExistError("closed"))


def test_nothing_is_accepted_once_closing() -> None:
    async def play() -> None:
        batch: BatchWriter[int, None] = BatchWriter(lambda items: asyncio.sleep(0))
        batch.start()
        await batch.close()
        await batch.submit(1)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(play())
