"""The audit trail: one JSON log line for every admin operation, whoever asked for it.

``audited`` wraps every public coroutine method of an operations class (``Operations``,
``RegistrationOperations``), so an operation added later is audited without anyone remembering to.
Each call writes one INFO line on the ``service.audit`` logger, for example::

    {"logger": "service.audit", "message": "admin action", "actor": "203.0.113.7",
     "operation": "rotate_secret", "partner": "ptn_01J...", "outcome": "ok"}

- who: ``actor``, set by the adapter with ``act_as``: the client address for the admin routes,
  ``cli:`` and the operating-system user for the commands;
- what: ``operation``, the method's name;
- which: ``partner``, ``delivery``, ``event`` and ``registration``, read from the arguments named
  ``partner_id``, ``delivery_id``, ``event_id`` and ``email`` (an address is masked as every log
  line masks them) and from the answer's ``partnerId``, ``eventId`` and ``deliveryId`` members (an
  operation whose answer names its resource otherwise, or counts what it did, says so with
  ``reports``: a replay's ``requeued``); an operation that learns what it acts on only by reading a
  body (a replay's filter) says so with ``note`` once the body is read and checked;
- the outcome: ``ok``, ``error`` with the ``status`` the admin API answers for it, or
  ``cancelled`` when the call was cancelled part way (its client went away) or its answer could
  not be taken (``AnswerLost``: a command's reader went away, or its disk is full, with the
  ``reason``).

Nothing else of the input or the answer is written, so no secret ever is. An operation that calls
another is one action: only the outermost call is logged. ``unaudited`` marks the few methods that
are not an operator's action (the metrics scrape reads queue statistics every few seconds).
"""

from __future__ import annotations

import asyncio
import functools
import getpass
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from service.db.faults import unavailable
from service.exceptions import DomainError
from service.logs import mask

log = logging.getLogger("service.audit")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

UNKNOWN_ACTOR = "unknown"  # an operation called outside any adapter (a script, a test)
# Arguments and answer members that name what an operation acted on, and the log key for each.
ARGUMENTS = {"partner_id": "partner", "delivery_id": "delivery", "event_id": "event", "email": "registration"}
ANSWER = {"partnerId": "partner", "eventId": "event", "deliveryId": "delivery"}
# Longer than any id the service makes (64, an event's): what a client gave is cut there, so a
# refused call naming a 30,000-character partner writes a line of ordinary length.
NAME_MAX = 80

_actor: ContextVar[str] = ContextVar("audit_actor", default=UNKNOWN_ACTOR)
_line: ContextVar[dict[str, Any] | None] = ContextVar("audit_line", default=None)  # the outermost call's


def command_actor() -> str:
    """``cli:`` and the user running the command (the uid where the system has no name for it)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry: a bare container uid
        user = str(os.getuid())
    return f"cli:{user}"


def act_as(actor: str) -> None:
    """Who the operations called from here on, in this task and the tasks it starts, act for."""
    _actor.set(actor)


def reports(**members: str) -> Callable[[F], F]:
    """Name the answer members that identify what the operation acted on, or count what it did:
    ``@reports(partner="id")``, ``@reports(requeued="deliveries")``."""

    def mark(method: F) -> F:
        method.__audit_reports__ = members  # type: ignore[attr-defined]
        return method

    return mark


def note(**facts: str | int | None) -> None:
    """Add to the line of the operation under way what it acts on, as only it knows once it has
    read and checked its input (the partner a replay's filter names); None is left out.

    Only what an operation names here is written: subjects and counts, never a body or a secret.
    Outside any audited call (a helper run on its own) this does nothing."""
    line = _line.get()
    if line is not None:
        line.update((key, _bounded(value)) for key, value in facts.items() if value is not None)


def _bounded(value: str | int) -> str | int:
    return _cut(value) if isinstance(value, str) else value


def _cut(name: str) -> str:
    """A name as the line carries it: at most ``NAME_MAX`` characters, a cut one ending in ``…``."""
    return name if len(name) <= NAME_MAX else name[: NAME_MAX - 1] + "\N{HORIZONTAL ELLIPSIS}"


def unaudited(method: F) -> F:
    """Leave a method out of the trail: it is no operator's action."""
    method.__audit__ = False  # type: ignore[attr-defined]
    return method


class AnswerLost(Exception):
    """The operation's answer could not be handed over: whoever asked went away (``cancelled``)
    or could not take it (``error`` with this ``reason``). No status: nothing was answered."""

    def __init__(self, reason: str, *, gone: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.gone = gone


def audited(cls: type[T]) -> type[T]:
    """Wrap every public coroutine method of ``cls`` (but ``unaudited`` ones) in ``audit``."""
    for name, method in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue
        if getattr(method, "__audit__", True):
            setattr(cls, name, audit(method))
    return cls


def audit(method: F) -> F:
    """``method``, writing one audit line per outermost call."""
    signature = inspect.signature(method)
    answer_members = dict(ANSWER)
    answer_members.update({member: key for key, member in getattr(method, "__audit_reports__", {}).items()})
    operation = method.__name__

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _line.get() is not None:  # called by another operation: part of its action, and line
            return await method(*args, **kwargs)
        line: dict[str, Any] = {"actor": _actor.get(), "operation": operation}
        line.update(_named(signature.bind(*args, **kwargs).arguments))
        token = _line.set(line)
        try:
            answer = await method(*args, **kwargs)
        except AnswerLost as lost:
            if lost.gone:
                line["outcome"] = "cancelled"
            else:
                line.update(outcome="error", reason=lost.reason)
            log.info("admin action", extra=line)
            raise
        except Exception as error:
            line.update(outcome="error", status=_status(error))
            log.info("admin action", extra=line)
            raise
        except asyncio.CancelledError:
            # The client went away, or the server is stopping, mid-operation: what it committed
            # before stays (an erasure may be done), so the action is on the trail all the same.
            line["outcome"] = "cancelled"
            log.info("admin action", extra=line)
            raise
        finally:
            _line.reset(token)
        if isinstance(answer, Mapping):
            line.update(
                (key, _bounded(answer[member]))
                for member, key in answer_members.items()
                if _fact(answer.get(member)) and key not in line
            )
        line["outcome"] = "ok"
        log.info("admin action", extra=line)
        return answer

    return wrapper  # type: ignore[return-value]


def _named(arguments: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for name, key in ARGUMENTS.items():
        value = arguments.get(name)
        if isinstance(value, str):
            yield key, _masked(value) if key == "registration" else _cut(value)


def _fact(value: object) -> bool:
    """An answer member the line may carry: a name (an id) or a count; never a document."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _masked(address: str) -> str:
    masked = mask(address)
    return masked if masked != address else "[address]"  # not shaped like an address: none of it


def _status(error: BaseException) -> int:
    """What the admin API answers for this error (the commands exit 1 on any of them)."""
    if isinstance(error, DomainError):
        # Imported here: the commands load no web framework unless an operation is refused.
        from service.errors import from_domain

        return int(from_domain(error).status_code)
    if unavailable(error):  # the storage cannot do the work now: answered 503 (service.handlers)
        return 503
    return 500
