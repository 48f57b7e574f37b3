"""The operator console at ``/console``: HTML pages for people over the same use cases as the
admin API (``Operations``, ``RegistrationOperations``) and read-only summaries (``Summaries``).

Served only when ``SERVICE_ADMIN_TOKEN`` is set (``create_app`` registers it then; otherwise every
``/console`` path is 404). One module per page family: ``auth``, ``overview``, ``partners``,
``deliveries``, ``events``, ``waitlist``; ``pages`` and ``session`` hold what they share.
"""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from service.admin import Unrouted
from service.clock import Clock
from service.console import auth, deliveries, events, overview, partners, waitlist
from service.console.pages import STATIC, Console, environment, failed, guard, unrouted
from service.console.session import PATH, Sessions
from service.settings import Settings

__all__ = ["PATH", "create_blueprint"]  # PATH: the prefix whose refused requests the console answers


def create_blueprint(settings: Settings, clock: Clock) -> tuple[Blueprint, Unrouted]:
    """The console's routes, and its answer to what routing refuses under ``PATH`` (for
    ``service.admin.guard``: no route's middleware runs for those, guard and headers included)."""
    if not settings.admin_token:
        raise ValueError("the console needs SERVICE_ADMIN_TOKEN")
    console = Console(
        settings=settings,
        clock=clock,
        sessions=Sessions(settings.admin_token, clock, secure=settings.base_url.startswith("https://")),
        env=environment(),
    )
    bp = Blueprint("console", url_prefix=PATH, strict_slashes=False)
    guard(bp, console)
    # Each of the package's own files at its own path, not the folder: any other name under
    # /static/ (a NUL, a name too long for the file system, a directory, a way out) is then the
    # not-found page below, never a file-system error answered 500 or taken for a storage fault.
    for file in sorted(STATIC.iterdir()):
        bp.static(f"/static/{file.name}", file, name=f"static_{file.stem}")
    for pages in (auth, overview, partners, deliveries, events, waitlist):
        pages.register(bp, console)

    async def unknown(request: Request, rest: str) -> HTTPResponse:
        return console.not_found(request)

    bp.add_route(unknown, "/<rest:path>", methods=["GET", "POST"])

    # What any of these routes raises (the database busy or unreachable, a bug) is the console's
    # page, not the JSON the app's error handler gives the API.
    def failure(request: Request, exception: Exception) -> HTTPResponse:
        return failed(console, request, exception)

    bp.exception(Exception)(failure)

    return bp, unrouted(console)
