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

**Shares.** The lanes together are held to ``pool`` senders (the worker's: all but a quarter of
them, ``worker.most_slots``). While the partners with work want more than that between them, each
lane holds at most its fair share (``fair_shares``: max-min, never less than one): partners that
hang cannot take every sender together, however many they are. A lane over its share after a claim
(a newcomer took part of the pool) lets nothing more out until its attempts in flight come down to
it. Shares are worked out again at every claim and every turn that logs, from what each lane wants
then (its slots, or fewer when it holds fewer jobs).

**Loans.** Until the lanes over their shares come down (one attempt timeout at most, when they
hang), the pool can be full while a newcomer is under its share. The senders the pool leaves free
(the ``reserve``) then lend each lane a few (``loan``: an eighth of the reserve, 16 of 128, at
least one) and no more: a partner whose work has just arrived starts at once, and a partner that
starts hanging after the others can take no more than its loan from the reserve, so it takes eight
of them, one after another, to use the reserve up; and a lane whose last attempt to end got no
answer (it timed out, say) borrows nothing more until one is delivered, so the hanging give their
loans back within one attempt timeout and the reserve is the newcomers' again. A lane whose last
attempt to end was delivered may also borrow past its share, a loan's worth beyond it and never
past its slots, while half the reserve is still free (``_lends_past_share``): a healthy partner
beside many that hang keeps its whole cap, where its share alone gave it 5 of its 8 slots beside
64 partners hanging at cap 8, and partners that deliver and then start hanging together can take
no more than that half, leaving the rest to newcomers. How a partner's last attempt ended is kept
when its lane empties, as its work often comes a claim at a time. Jobs let out never outnumber the
senders, so none waits in the senders' queue behind hanging attempts; a lane stopped by the pool or
the senders, not by its own share, waits its turn (``_waiting``) for the next sender to come free.

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

LOANS = 8  # the reserve lends each lane an eighth of it at most (``Lanes`` "Loans")


def fair_shares(wants: Sequence[int], pool: int) -> list[int]:
    """How many senders each of ``wants`` may hold, out of ``pool``: what it wants when all of them
    fit; otherwise max-min fair (no share grows while a smaller one could), each at least one (a
    partner is slowed, never stopped), and what an even split leaves over goes one each to the
    first of those held back, in order."""
    if sum(wants) <= pool:
        return list(wants)
    shares = [0] * len(wants)
    left = pool
    order = sorted(range(len(wants)), key=wants.__getitem__)
    for position, index in enumerate(order):
        level = left // (len(order) - position)
        if wants[index] <= level:
            shares[index] = wants[index]
            left -= wants[index]
            continue
        held_back = order[position:]
        over = left - level * len(held_back)
        for rank, held in enumerate(sorted(held_back)):
            shares[held] = max(1, level + (rank < over))
        break
    return shares


@dataclass(slots=True)
class _Lane(Generic[J]):
    partner_id: str
    slots: int
    limit: int = 0  # jobs it may have out at once: its slots, or its share when that is less
    out: int = 0  # let out to the senders: waiting for one, or being attempted
    failed: int = 0  # slots held empty by failed attempts until the next turn logs them
    parked: deque[tuple[float, J]] = field(default_factory=deque)  # (start by, job)


class Lanes(Generic[J]):
    """One lane per partner; ``let_out`` receives each job, with the moment it must start by, as
    soon as it may be sent."""

    def __init__(
        self,
        let_out: Callable[[tuple[float, J]], None],
        *,
        pool: int | None = None,
        senders: int | None = None,
    ) -> None:
        """``pool``: the senders the lanes may hold together, shared fairly (no bound when None);
        ``senders``: all of them, the pool and the reserve it leaves (the pool when None)."""
        self._let_out = let_out
        self._lanes: dict[str, _Lane[J]] = {}
        self._pool = pool
        self._senders = senders if senders is not None else pool or 0
        reserve = self._senders - (pool or 0)
        self.loan = max(1, reserve // LOANS) if reserve > 0 else 0  # jobs a lane may borrow
        # Lanes past their shares borrow only while fewer jobs than this are let out: half the
        # reserve stays free for the others.
        self._past_share_until = self._senders - max(reserve, 0) // 2
        self.sending = 0  # jobs let out, every lane together
        # How each partner's last attempt ended, kept when its lane empties (a partner's work often
        # comes a claim at a time): delivered, it may borrow past its share; with no answer (it
        # timed out, say), the reserve lends it nothing.
        self._delivering: set[str] = set()
        self._silent: set[str] = set()
        # Lanes with room under their shares that the pool or the senders stopped, in turn.
        self._waiting: dict[str, None] = {}
        self.parked = 0  # jobs held back, every lane together
        # The lanes wanted more than the pool at the last share: some are held to their shares.
        self.contended = False

    def add(self, jobs: Sequence[J], *, start_by: float) -> None:
        """Take a claim's jobs, to start by ``start_by`` (the caller's clock): each lane's slots
        become the claim's, and what fits is let out."""
        for job in jobs:
            lane = self._lanes.get(job.partner_id)
            if lane is None:
                lane = self._lanes[job.partner_id] = _Lane(job.partner_id, job.slots)
            lane.slots = job.slots
            lane.parked.append((start_by, job))
            self.parked += 1
        grown = self._share()
        for partner_id in dict.fromkeys(job.partner_id for job in jobs):
            self._fill(self._lanes[partner_id])
        for lane in grown:
            self._fill(lane)

    def done(self, partner_id: str, *, ok: bool = True, answered: bool = True) -> None:
        """A job let out has been attempted (or handed back): its slot goes to the next one, unless
        the attempt failed (``ok`` False), which holds the slot empty until ``reopen``; a failed
        attempt that got no answer (``answered`` False: it timed out, say) also stops the reserve
        lending to the partner until one of its attempts is delivered."""
        lane = self._lanes[partner_id]
        lane.out -= 1
        self.sending -= 1
        if not ok:
            lane.failed += 1
            self._delivering.discard(partner_id)
            if answered:
                self._silent.discard(partner_id)
            else:
                self._silent.add(partner_id)
        if self._waiting:
            self._serve_waiting()
        self._fill(lane)
        self._forget_if_empty(partner_id, lane)

    def hand_on(self, partner_id: str) -> tuple[float, J] | None:
        """A job let out has been delivered: its slot goes to the partner's next parked job, which
        is returned (with its start-by moment) for the caller to send itself, in place of letting
        it out; None when none waits or the slot is no longer the partner's (as ``done``)."""
        lane = self._lanes[partner_id]
        self._silent.discard(partner_id)
        self._delivering.add(partner_id)
        if lane.parked and lane.out + lane.failed <= lane.limit:
            self.parked -= 1
            handed = lane.parked.popleft()
            if lane.limit < lane.slots:  # held to its share: delivering, it may borrow past it
                self._fill(lane)
            return handed
        self.done(partner_id)
        return None

    def reopen(self, partner_ids: Iterable[str]) -> None:
        """The partners' failed attempts are logged (and their circuits still let them send): the
        slots they held empty are free again."""
        reopened = []
        for partner_id in partner_ids:
            lane = self._lanes.get(partner_id)
            if lane is not None and lane.failed:
                lane.failed = 0
                reopened.append((partner_id, lane))
        grown = self._share()
        for partner_id, lane in reopened:
            self._fill(lane)
            self._forget_if_empty(partner_id, lane)
        for lane in grown:
            self._fill(lane)

    def take_back(self, partner_id: str) -> list[J]:
        """The partner's parked jobs, removed (its circuit opened, it was paused, disabled or
        removed, or its URL or secrets changed); jobs already let out are not recalled."""
        lane = self._lanes.get(partner_id)
        if lane is None or not lane.parked:
            return []
        taken = [job for _, job in lane.parked]
        lane.parked.clear()
        self.parked -= len(taken)
        self._forget_if_empty(partner_id, lane)
        return taken

    def first_parked(self) -> Iterator[tuple[str, J]]:
        """Each partner with parked jobs, and the first of them: the one its worker claimed
        earliest, as a lane parks jobs in the order they were claimed."""
        for partner_id, lane in self._lanes.items():
            if lane.parked:
                yield partner_id, lane.parked[0][1]

    def take_all(self) -> Iterator[J]:
        """Every parked job, removed (the worker is stopping)."""
        for partner_id in list(self._lanes):
            yield from self.take_back(partner_id)

    def out(self, partner_id: str) -> int:
        lane = self._lanes.get(partner_id)
        return lane.out if lane is not None else 0

    def held_to(self, partner_id: str) -> float:
        """The part of its slots the partner's lane may have out at once now: below 1 while the
        lane is held to a fair share of the pool, 1 otherwise (and with no lane)."""
        lane = self._lanes.get(partner_id)
        if lane is None or lane.limit >= lane.slots:
            return 1.0
        return max(lane.limit, 1) / lane.slots

    def _forget_if_empty(self, partner_id: str, lane: _Lane[J]) -> None:
        if not lane.out and not lane.parked:
            del self._lanes[partner_id]

    def share(self, partner_id: str) -> int:
        """How many jobs the partner's lane may have out at once now (0 with no lane)."""
        lane = self._lanes.get(partner_id)
        return lane.limit if lane is not None else 0

    def _share(self) -> list[_Lane[J]]:
        """Set each lane's limit: its slots, or its fair share of the pool when the lanes want more
        between them. The lanes whose limit grew (another lane emptied, or wants less) are returned,
        for the caller to fill."""
        lanes = list(self._lanes.values())
        wants = [min(lane.slots, lane.out + lane.failed + len(lane.parked)) for lane in lanes]
        shares = fair_shares(wants, self._pool) if self._pool is not None else wants
        self.contended = shares != wants
        grown = []
        for lane, want, share in zip(lanes, wants, shares, strict=True):
            # A lane given all it wants is held to its slots: what it wants grows only by a claim,
            # which shares again.
            limit = lane.slots if share == want else share
            if limit > lane.limit:
                grown.append(lane)
            lane.limit = limit
        return grown

    def _fill(self, lane: _Lane[J]) -> None:
        while lane.parked:
            held = lane.out + lane.failed
            under_share = held < lane.limit
            # A sender of the pool or a loan while under its share; past it, a loan once delivering.
            if not ((under_share and self._free_for(lane)) or self._lends_past_share(lane, held)):
                if under_share:  # stopped by the pool or the senders: its turn comes
                    self._waiting[lane.partner_id] = None
                return
            lane.out += 1
            self.sending += 1
            self.parked -= 1
            self._let_out(lane.parked.popleft())

    def _free_for(self, lane: _Lane[J]) -> bool:
        """Whether a sender is free for the lane's next job: the pool has room, or the reserve
        lends the lane one (while it has fewer than a loan out, and its last attempt to end was
        answered: a partner that hangs borrows once, for one attempt timeout)."""
        if self._pool is None or self.sending < self._pool:
            return True
        return lane.partner_id not in self._silent and lane.out < self.loan and self.sending < self._senders

    def _lends_past_share(self, lane: _Lane[J], held: int) -> bool:
        """Whether a lane held to its share (``held`` slots taken) may let one more job out past it:
        its last attempt to end was delivered, it stays within its slots and a loan beyond its
        share, and half the reserve is still free."""
        return (
            held < lane.slots
            and lane.partner_id in self._delivering
            and held - lane.limit < self.loan
            and self.sending < self._past_share_until
        )

    def _serve_waiting(self) -> None:
        """A sender came free: the lanes waiting for one, in turn, take what they may."""
        waiting, self._waiting = self._waiting, {}
        for partner_id in waiting:
            lane = self._lanes.get(partner_id)
            if lane is None:
                continue
            if self.sending >= self._senders:  # none left: the rest keep their places
                self._waiting[partner_id] = None
                continue
            self._fill(lane)
