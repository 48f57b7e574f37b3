"""Identifiers: a prefix and a ULID (a millisecond timestamp and 80 random bits).

``new_id`` is what the service uses. ``SeededIds`` makes the same sequence on every run from an
injected clock and a seed, so demo data made by driving the service (``service.demo``) names its
partners the same way each time and the notebooks that show them stay byte-stable.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from ulid import ULID

IdSource = Callable[[str], str]  # prefix -> "prefix_<ULID>"


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"


class SeededIds:
    """ULIDs from ``clock``'s time and a ``random.Random(seed)``: reproducible, never secret."""

    def __init__(self, clock: Callable[[], datetime], seed: int | str) -> None:
        self._clock = clock
        self._random = random.Random(seed)

    def __call__(self, prefix: str) -> str:
        millis = int(self._clock().timestamp() * 1000)
        return f"{prefix}_{ULID.from_bytes(millis.to_bytes(6, 'big') + self._random.randbytes(10))}"
