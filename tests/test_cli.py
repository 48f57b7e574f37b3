"""`python -m service serve`: what it tells the operator before it starts."""

from __future__ import annotations

import pytest

from service.cli import serve_warnings
from service.settings import Settings


@pytest.mark.parametrize(
    ("workers", "storage", "warned"),
    [(1, "memory://", False), (2, "memory://", True), (2, "redis://127.0.0.1:6379/0", False)],
)
def test_serve_warns_when_processes_would_each_count_the_limit(
    workers: int, storage: str, warned: bool
) -> None:
    found = serve_warnings(Settings(rate_limit_storage=storage), workers)
    assert bool(found) is warned
    assert all(f"up to {workers} times" in warning and "redis://" in warning for warning in found)
