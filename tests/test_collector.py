"""The garbage-collector settings `serve` and `worker` give their processes once started."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from service import collector
from service.app import create_app
from service.settings import Settings
from tests.conftest import Client


@pytest.fixture
def restored_collector() -> Iterator[tuple[int, int, int]]:
    """The interpreter's settings before the test, put back after it."""
    before = gc.get_threshold()
    yield before
    gc.unfreeze()
    gc.set_threshold(*before)


def test_tune_freezes_what_is_loaded_and_makes_young_passes_rarer(
    restored_collector: tuple[int, int, int],
) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    collector.tune()
    _, middle, old = restored_collector
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, middle, old)
    assert gc.get_freeze_count() > 1000  # modules, classes, functions: start-up's objects


@pytest.mark.parametrize("tuned", [True, False])
def test_the_app_tunes_the_collector_only_when_asked(
    restored_collector: tuple[int, int, int], sqlite_url: str, tuned: bool
) -> None:
    gc.unfreeze()
    app = create_app(Settings(database_url=sqlite_url), tune_collector=tuned)
    with Client(app) as client:
        assert client.get("/healthz").status == 200
        young = collector.YOUNG_THRESHOLD if tuned else restored_collector[0]
        assert gc.get_threshold()[0] == young
        assert (gc.get_freeze_count() > 0) is tuned
