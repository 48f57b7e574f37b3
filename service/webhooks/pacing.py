"""When the delivery worker claims and when it logs: one pure decision over a small state record.

The worker's loop (``service.webhooks.worker``) has one database user, which runs a transaction
per turn: it logs the attempts finished since the last turn, hands back claims that waited too
long, and claims more. ``decide`` says whether to turn now, how many deliveries to claim in it,
and otherwise how long the waiting attempts may still wait.

The rules, in order of weight:

- **Lanes refill as attempts are logged.** A slot passes from one attempt to the next in the
  worker's lanes (``service.webhooks.lanes``) with no turn at all; what a turn refills is the lanes'
  parked jobs, since a logged attempt no longer counts against its partner's claims. Whenever
  senders are starved (nothing let out waits for them), finished attempts wait no longer than a
  turn takes (and never past ``log_delay``) to share a commit, and the same transaction claims
  again: under a backlog, turns run back to back. They wait only for attempts to partners that
  are answering (delivered in the last turn, or had an attempt finish since): another partner
  may be hanging, and its attempts in flight would hold every other partner's logging, and the
  claim that refills their lanes, for nothing. A failing partner is answering, so its failures
  still share a commit, and its circuit opens after no more attempts than its cap.
- **Commits stay batched where the rate needs them.** Attempts finishing while claimed work still
  waits for a sender share a commit: they wait until a batch of them has finished or the oldest
  has waited ``log_delay``. Turns run back to back under a backlog, so what finishes during one
  turn goes into the next.
- **Claims stop when nothing more is claimable** (``drained``: the last claim took fewer than it
  asked for), until an attempt is logged (its slot is free), something is published or resumed,
  or the poll interval passes; the worker keeps that flag (``Moment.drained``).
- **Every turn that runs claims what there is room for**, so a transaction paid for logging also
  tops up the lanes. Room counts the jobs let out to the senders, not the parked ones: a lane
  parks at most its depth, and a hanging partner's parked jobs must not keep others from claiming.
- **A turn that finds less than a batch parked claims up to two.** Under a backlog a turn lasts
  about as long as the senders take to send what the lanes hold, since each of its round trips
  waits on a loop busy with them: claiming one batch a turn, the lanes ran dry at every turn's end
  and the senders idled until it committed. The second batch builds the stock back up, so the
  senders are still busy when the next claim lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class Pace:
    """A worker's fixed sizes."""

    batch: int  # finished attempts enough to log at once; a turn claims up to one batch, or two
    capacity: int  # jobs a worker lets out at most: in flight or waiting for a sender
    log_delay: float  # seconds a finished attempt may wait to share a commit while senders are busy


class Moment(NamedTuple):
    """What the loop holds now. A named tuple, like the worker's ``Job``: senders read one after
    every attempt, and it is made in a fraction of a frozen dataclass's time."""

    finished: int = 0  # attempts finished and not yet logged
    expired: int = 0  # claims to hand back unsent
    queued: int = 0  # jobs let out, waiting for a sender
    in_flight: int = 0  # attempts being sent
    # Of those, attempts to partners that neither delivered in the last turn nor had an attempt
    # finish since: they may be hanging, so nothing waits for them.
    silent: int = 0
    parked: int = 0  # jobs claimed and held in the lanes until their partners have a free slot
    drained: bool = False  # the last claim took all there was, and nothing freed or woke since
    oldest: float = 0.0  # seconds the oldest finished attempt has waited
    turn_seconds: float = 0.0  # how long the last turn took


@dataclass(frozen=True, slots=True)
class Turn:
    """What to do now: a transaction (``now``) claiming up to ``claim``, or wait."""

    now: bool
    claim: int = 0
    wait: float | None = None  # with nothing to do now: seconds until the finished attempts are due
    # to be logged; None: until nudged (an attempt finished, a publish) or the poll interval passes


WAIT = Turn(now=False)


def decide(moment: Moment, pace: Pace) -> Turn:
    """Whether to turn now, and how many deliveries that turn claims."""
    held = moment.queued + moment.in_flight
    reach = pace.batch if moment.parked >= pace.batch else 2 * pace.batch
    room = max(0, min(pace.capacity - held, reach))
    starved = moment.queued == 0
    # Something may be claimable: a claim would not be wasted on its own.
    claim_now = room > 0 and not moment.drained and (room >= pace.batch or starved)
    # How long finished attempts wait to share a commit: no longer than a turn takes while senders
    # are starved (under a backlog turns run back to back), the log delay while they are busy.
    patience = min(pace.log_delay, moment.turn_seconds) if starved else pace.log_delay
    if starved and moment.in_flight <= moment.silent:
        patience = 0.0  # nothing out is likely to share the commit soon: log at once
    log_now = moment.finished > 0 and (moment.finished >= pace.batch or moment.oldest >= patience)
    if claim_now or log_now or moment.expired:
        # Logging frees the finished attempts' partner slots, so a turn that logs claims even
        # after a claim came back short.
        claim = room if not moment.drained or moment.finished else 0
        return Turn(now=True, claim=claim)
    if moment.finished:
        return Turn(now=False, wait=patience - moment.oldest)
    return WAIT


def idle(moment: Moment) -> bool:
    """Nothing is claimable, held, finished or to be handed back: a drain is done."""
    return (
        moment.drained
        and not moment.finished
        and not moment.expired
        and not moment.queued
        and not moment.in_flight
        and not moment.parked
    )
