"""Lanes: a worker's claimed deliveries, one lane per partner, let out to the senders slot by slot.

A claim hands the worker more of a partner's due deliveries than the partner may have in flight
(``claim.claim_due`` with ``depth``), each job carrying the partner's slots: how many of its
attempts this worker may have in flight at once, as of that claim. The lane lets a job out to the
senders while the partner has a free slot and parks the rest; when an attempt ends, its slot goes
at once to the next parked job (after a delivered attempt, ``hand_on`` gives that job to the
sender that finished, to send itself). So a partner at its cap stays at its cap while its lane holds
work, with no database round trip between one attempt and the next: the worker tops lanes up in
its next turn, while the senders go on.

An attempt that failed does not pass its slot on: the slot stays empty until the worker's next turn
has logged the failure (``reopen``), so a partner failing every attempt gets no more attempts per
turn than it has slots, and once its circuit opens the turn takes its parked jobs back
(``take_back``).

Everything here is plain bookkeeping over deques, driven by the worker's single event loop: no
locks, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Slotted(Protocol):
    @property
    def partner_id(self) -> str: ...

    @property
    def slots(self) -> int: ...


J = TypeVar("J", bound=Slotted)


@dataclass(slots=True)
class _Lane(Generic[J]):
    slots: int
    out: int = 0  # let out to the senders: waiting for one, or being attempted
    failed: int = 0  # slots held empty by failed attempts until the next turn logs them
    parked: deque[tuple[float, J]] = field(default_factory=deque)  # (start by, job)


class Lanes(Generic[J]):
    """One lane per partner; ``let_out`` receives each job, with the moment it must start by, as
    soon as it may be sent."""

    def __init__(self, let_out: Callable[[tuple[float, J]], None]) -> None:
        self._let_out = let_out
        self._lanes: dict[str, _Lane[J]] = {}
        self.parked = 0  # jobs held back, every lane together

    def add(self, jobs: Sequence[J], *, start_by: float) -> None:
        """Take a claim's jobs, to start by ``start_by`` (the caller's clock): each lane's slots
        become the claim's, and what fits is let out."""
        for job in jobs:
            lane = self._lanes.get(job.partner_id)
            if lane is None:
                lane = self._lanes[job.partner_id] = _Lane(job.slots)
            lane.slots = job.slots
            lane.parked.append((start_by, job))
            self.parked += 1
        for partner_id in dict.fromkeys(job.partner_id for job in jobs):
            self._fill(self._lanes[partner_id])

    def done(self, partner_id: str, *, ok: bool = True) -> None:
        """A job let out has been attempted (or handed back): its slot goes to the next one, unless
        the attempt failed (``ok`` False), which holds the slot empty until ``reopen``."""
        lane = self._lanes[partner_id]
        lane.out -= 1
        if not ok:
            lane.failed += 1
        self._fill(lane)
        self._forget_if_empty(partner_id, lane)

    def hand_on(self, partner_id: str) -> tuple[float, J] | None:
        """A job let out has been delivered: its slot goes to the partner's next parked job, which
        is returned (with its start-by moment) for the caller to send itself, in place of letting
        it out; None when none waits or the slot is no longer the partner's (as ``done``)."""
        lane = self._lanes[partner_id]
        if lane.parked and lane.out + lane.failed <= lane.slots:
            self.parked -= 1
            return lane.parked.popleft()
        self.done(partner_id)
        return None

    def reopen(self, partner_ids: Iterable[str]) -> None:
        """The partners' failed attempts are logged (and their circuits still let them send): the
        slots they held empty are free again."""
        for partner_id in partner_ids:
            lane = self._lanes.get(partner_id)
            if lane is not None and lane.failed:
                lane.failed = 0
                self._fill(lane)
                self._forget_if_empty(partner_id, lane)

    def take_back(self, partner_id: str) -> list[J]:
        """The partner's parked jobs, removed (its circuit opened, or it was paused or disabled);
        jobs already let out are not recalled."""
        lane = self._lanes.get(partner_id)
        if lane is None or not lane.parked:
            return []
        taken = [job for _, job in lane.parked]
        lane.parked.clear()
        self.parked -= len(taken)
        self._forget_if_empty(partner_id, lane)
        return taken

    def take_all(self) -> Iterator[J]:
        """Every parked job, removed (the worker is stopping)."""
        for partner_id in list(self._lanes):
            yield from self.take_back(partner_id)

    def out(self, partner_id: str) -> int:
        lane = self._lanes.get(partner_id)
        return lane.out if lane is not None else 0

    def _forget_if_empty(self, partner_id: str, lane: _Lane[J]) -> None:
        if not lane.out and not lane.parked:
            del self._lanes[partner_id]

    def _fill(self, lane: _Lane[J]) -> None:
        while lane.parked and lane.out + lane.failed < lane.slots:
            lane.out += 1
            self.parked -= 1
            self._let_out(lane.parked.popleft())
