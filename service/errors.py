"""Errors the service raises, and the one JSON shape every error answer takes.

    ServiceError (sanic.exceptions.SanicException)
    ├── BadRequest            400  the body is not what the route accepts; carries field errors
    ├── Unauthorized          401  admin bearer token missing or wrong
    ├── NotFound              404  unknown route or resource
    ├── MethodNotAllowed      405
    ├── Conflict              409  the request is valid but the resource's state forbids it
    ├── PayloadTooLarge       413
    ├── UnsupportedMediaType  415
    ├── TooManyRequests       429  carries ``retry_after`` seconds
    └── ServiceUnavailable    503  storage unreachable; nothing was accepted; carries ``Retry-After``

Every error answers ``{"ok": false, "message": "...", "errors": [...]}`` (``errors`` only where
fields are at fault, at most ``FIELD_ERRORS_SHOWN`` of them and then one saying how many more).
``message`` is a fixed human sentence chosen by the service, never text the client sent, so
nothing a client submits is echoed back.

Operations raise the domain errors of ``service.exceptions``; ``from_domain`` is the one place
they become statuses (InvalidInput 400, UnknownResource 404, StateConflict 409).
"""

from __future__ import annotations

from typing import Any

from sanic.exceptions import SanicException

from service.exceptions import (
    DomainError,
    FieldError,
    InvalidInput,
    StateConflict,
    UnknownResource,
    error_body,
)

__all__ = ["FieldError", "ServiceError", "from_domain"]

# An answer names at most this many fields at fault, then says in one more entry how many it left
# out: a body of thousands of unknown members would otherwise be answered with megabytes.
FIELD_ERRORS_SHOWN = 20
# Seconds a 503 asks a client to wait before trying again, where nothing better is known: what the
# shipped nginx configuration says on its own 503 page (deploy/nginx).
RETRY_AFTER_UNAVAILABLE = 5


def shown(errors: list[FieldError]) -> list[FieldError]:
    """``errors`` as an answer lists them: the first ``FIELD_ERRORS_SHOWN``, and then, when there
    are more, one entry in the same shape (``field`` ``body``, code ``more_errors``) saying how many."""
    if len(errors) <= FIELD_ERRORS_SHOWN:
        return errors
    more = len(errors) - FIELD_ERRORS_SHOWN
    sentence = "1 more field is at fault." if more == 1 else f"{more} more fields are at fault."
    return [*errors[:FIELD_ERRORS_SHOWN], FieldError("body", "more_errors", sentence)]


class ServiceError(SanicException):
    status_code = 500
    message = "The server could not complete the request."
    quiet = True

    def __init__(
        self,
        message: str | None = None,
        *,
        errors: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        text = message or type(self).message
        super().__init__(text, status_code=type(self).status_code, headers=headers)
        self.text = text
        self.field_errors = list(errors or ())

    def body(self) -> dict[str, Any]:
        return error_body(self.text, shown(self.field_errors))


class BadRequest(ServiceError):
    status_code = 400
    message = "The request is not valid."


class Unauthorized(ServiceError):
    status_code = 401
    message = "A valid bearer token is required."


class NotFound(ServiceError):
    status_code = 404
    message = "Nothing is here."


class MethodNotAllowed(ServiceError):
    status_code = 405
    message = "This method is not allowed here."


class Conflict(ServiceError):
    status_code = 409
    message = "The request conflicts with the current state of the resource."


class PreconditionFailed(ServiceError):
    status_code = 412
    message = "The document's current ETag is none of those in If-Match."


class PayloadTooLarge(ServiceError):
    status_code = 413
    message = "The request body is too large."


class UnsupportedMediaType(ServiceError):
    status_code = 415
    message = "Send application/json or application/x-www-form-urlencoded."


class TooManyRequests(ServiceError):
    status_code = 429
    message = "Too many requests; try again later."

    def __init__(self, retry_after: int) -> None:
        self.retry_after = max(1, int(retry_after))
        super().__init__(headers={"Retry-After": str(self.retry_after)})


class ServiceUnavailable(ServiceError):
    status_code = 503
    message = "The service is briefly unavailable; try again shortly."

    def __init__(self, message: str | None = None, *, retry_after: int = RETRY_AFTER_UNAVAILABLE) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


_STATUS_OF: tuple[tuple[type[DomainError], type[ServiceError]], ...] = (
    (InvalidInput, BadRequest),
    (UnknownResource, NotFound),
    (StateConflict, Conflict),
)


def from_domain(error: DomainError) -> ServiceError:
    """The HTTP answer to a domain error: same sentence, same field errors, the matching status."""
    for domain, http in _STATUS_OF:
        if isinstance(error, domain):
            return http(error.message, errors=error.field_errors)
    return ServiceError(error.message, errors=error.field_errors)
