"""Domain errors: what an operation refuses, in terms of the service, never of HTTP.

    DomainError
    ├── InvalidInput     the input is not acceptable; carries one ``FieldError`` per member at fault
    ├── UnknownResource  no partner, delivery or registration has this id
    └── StateConflict    the input is valid but the resource's state forbids it

Operations (``service.webhooks.operations``), validation (``service.events``) and storage raise
these. Only the adapters translate them: the HTTP layer into statuses (``service.errors.from_domain``),
the commands into the same JSON error shape on stderr. This module imports nothing of the service,
so any module may raise from it without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ECHO_MAX_CHARS = 64  # of a member name an error body repeats; longer names are cut, then "…"


def echoed_name(name: str) -> str:
    """A member or parameter name as an error body may repeat it.

    Names often come from the client (an unknown member, a repeated field), so the answer bounds
    them: at most ``ECHO_MAX_CHARS`` characters and then "…", and lone surrogates, which JSON can
    spell but UTF-8 cannot carry, become U+FFFD. A client's key never makes an error large.
    """
    if len(name) > ECHO_MAX_CHARS:
        name = name[:ECHO_MAX_CHARS] + "…"
    if name.isascii():
        return name
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in name)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One member at fault: ``field`` is a dotted path, ``code`` a stable machine token.

    ``field`` passes through ``echoed_name`` here, so no error, wherever it is raised, repeats a
    client's name unbounded.
    """

    field: str
    code: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "field", echoed_name(self.field))

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "code": self.code, "message": self.message}


def error_body(message: str, field_errors: list[FieldError]) -> dict[str, Any]:
    """The one error shape: ``{"ok": false, "message": ..., "errors": [...]}`` (``errors`` only
    where members are at fault)."""
    document: dict[str, Any] = {"ok": False, "message": message}
    if field_errors:
        document["errors"] = [error.as_dict() for error in field_errors]
    return document


class DomainError(Exception):
    """``message`` is a fixed sentence of the service's own: it never holds text a client sent."""

    message = "The request cannot be completed."

    def __init__(self, message: str | None = None, *, errors: list[FieldError] | None = None) -> None:
        self.message = message or type(self).message
        self.field_errors = list(errors or ())
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.field_errors)


class InvalidInput(DomainError):
    message = "The request is not valid."


class UnknownResource(DomainError):
    message = "Nothing has this id."


class StateConflict(DomainError):
    message = "The request conflicts with the current state of the resource."


def invalid(field: str, code: str, message: str) -> InvalidInput:
    """An ``InvalidInput`` naming one member."""
    return InvalidInput(errors=[FieldError(field, code, message)])
