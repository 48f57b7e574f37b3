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
    └── ServiceUnavailable    503  storage unreachable; nothing was accepted

Every error answers ``{"ok": false, "message": "...", "errors": [...]}`` (``errors`` only where
fields are at fault). ``message`` is a fixed human sentence chosen by the service, never text the
client sent, so nothing a client submits is echoed back.

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
        return error_body(self.text, self.field_errors)


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
