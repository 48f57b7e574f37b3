"""A deadline on shutdown: once asked to stop, the process ends within it, whatever it waits on.

Stopping waits for attempts in flight (up to the attempt timeout), then for the last log writes and
for the database connections to close. On a link gone silent those waits are bounded one by one
(``service.db.engine``), but their sum is not what an operator or a supervisor should wait for: a
timer armed when the stop begins ends the process at the deadline (docs/architecture.md "Faults
and slow clients"). It runs on a thread of its own, so nothing the event loop waits on delays it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

from service.settings import Settings

log = logging.getLogger(__name__)

# Seconds beyond the attempt timeout a stop may take: closing connections and the last commit.
MARGIN = 10.0
# What the process exits with when the deadline ends it (it did not finish stopping cleanly).
FORCED_EXIT = 1


def deadline_for(settings: Settings) -> float:
    """Seconds from the stop signal to the end of the process: the attempt timeout plus a margin."""
    return settings.webhook_timeout + MARGIN


def _force_exit(deadline: float) -> None:
    log.warning("shutdown did not finish within its deadline; exiting now", extra={"deadline_s": deadline})
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(FORCED_EXIT)


def arm(deadline: float, on_deadline: Callable[[float], None] = _force_exit) -> threading.Timer:
    """Start the clock: ``on_deadline(deadline)`` runs after ``deadline`` seconds unless cancelled
    (the process normally ends first, and the daemon timer with it)."""
    timer = threading.Timer(deadline, on_deadline, args=(deadline,))
    timer.daemon = True
    timer.name = "shutdown-deadline"
    timer.start()
    return timer
