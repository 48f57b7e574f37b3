"""The service's own log configuration (``service.logs.config``) written to a buffer, as ``serve``
and the commands write it to stderr: for tests that read every line a run writes."""

from __future__ import annotations

import copy
import io
import json
import logging
import logging.config
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from service import logs


@contextmanager
def service_logs(level: str = "INFO") -> Iterator[io.StringIO]:
    """Every line the service logs at ``level`` and above, in its JSON form. Apps made with
    ``structured_logs`` and commands configure logging for themselves: here, to the same buffer.
    The loggers it touches are put back as they were afterwards."""
    buffer = io.StringIO()
    configured = copy.deepcopy(logs.config(level))
    configured["handlers"]["json"]["stream"] = buffer
    names = ["", *configured["loggers"]]
    before = {
        name: (logger.level, logger.propagate, list(logger.handlers), list(logger.filters))
        for name in names
        for logger in [logging.getLogger(name)]
    }
    configure = logs.configure

    def to_the_buffer(level: str = level) -> None:
        logging.config.dictConfig(configured)

    logs.configure = to_the_buffer  # type: ignore[assignment]
    to_the_buffer()
    try:
        yield buffer
    finally:
        logs.configure = configure  # type: ignore[method-assign]
        for name, (was, propagate, handlers, filters) in before.items():
            logger = logging.getLogger(name)
            logger.setLevel(was)
            logger.propagate = propagate
            logger.handlers[:] = handlers
            logger.filters[:] = filters


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    """The buffer's log lines, each a JSON object."""
    return [json.loads(line) for line in buffer.getvalue().splitlines()]
