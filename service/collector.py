"""Garbage-collector settings for the long-running processes: ``serve`` and ``worker``.

CPython's cyclic collector makes a young-generation pass every 700 net allocations of container
objects. One registration or delivery allocates hundreds (headers, futures, rows, models), so under
load a pass comes every few requests, and every tenth or hundredth pass also walks the older
generations: everything the process holds. Measured on the delivery backlog, collection took about
a tenth of the worker's CPU.

Once a process has started, ``tune()``:

- collects, then freezes what start-up loaded (modules, compiled SQL, rendered documents) into the
  permanent generation, which no pass walks again;
- makes a young pass every ``YOUNG_THRESHOLD`` allocations instead of 700.

Reference counting still frees almost everything at once; only objects in reference cycles wait,
for at most ``YOUNG_THRESHOLD`` allocations more, so memory stays bounded.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def tune() -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
