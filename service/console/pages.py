"""What every console page shares: the templates, the guard in front of each request, the headers
on each answer, the turn of an action's outcome into a page (post/redirect/get), and the page for
what a route raised (the database busy or unreachable, a bug), never the API's JSON.

Templates are Jinja2 with autoescape on for every file: partner names, response excerpts,
registrations and payloads are hostile text and are only ever shown as text. The stylesheet is
the package's own file, served by Sanic's static handler; no page has a script.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, PackageLoader
from sanic import Blueprint, HTTPResponse, Request
from sanic.exceptions import MethodNotAllowed, SanicException
from sanic.headers import parse_content_header
from sanic.response import html, redirect

from service import audit
from service.admin import FailedAttempts, Unrouted
from service.clock import Clock, format_timestamp
from service.console import charts
from service.console.session import (
    CSRF_FIELD,
    PATH,
    EndedSessions,
    Session,
    Sessions,
    csrf_matches,
    safe_next,
    same_origin,
)
from service.errors import from_domain
from service.exceptions import DomainError, FieldError, InvalidInput
from service.handlers import assess, count
from service.params import one_each, query_pairs
from service.paths import unescape_unreserved
from service.registrations_ops import RegistrationOperations
from service.settings import Settings
from service.summaries_ops import Summaries, Totals
from service.text import unicode_only, visible
from service.waitlist import client_address
from service.webhooks.operations import Operations

# The longest page address the sign-in carries on (``next``), percent-encoded in its Location at up to
# three times as long: a reverse proxy holds an answer's headers in a few kilobytes (nginx 4k unless
# told otherwise), and a longer one would fail the request there and count the server failed.
MAX_NEXT = 1024

STATIC = Path(__file__).resolve().parent / "static"
# Every console answer: nothing inline, nothing from elsewhere, never framed or cached
# (docs/architecture.md "Operator console").
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
OPEN_PATHS = (PATH + "/login", PATH + "/static/")  # served without a session


def _when(moment: datetime | None) -> str:
    return format_timestamp(moment) if moment is not None else "—"


def _shown(value: Any) -> Any:
    """Text a page cannot carry (a refused form value echoed back: lone surrogates, NUL) with those
    characters as U+FFFD and its lines kept, so the page still encodes and the operator sees what
    to fix."""
    return unicode_only(value) if isinstance(value, str) else value


def _visible(value: object) -> object:
    """Stored text a client or partner wrote, each character that hides or reorders it shown as
    its ``\\uXXXX`` escape (``service.text.visible``); a text area's line ends are line feeds."""
    return visible(value.replace("\r\n", "\n")) if isinstance(value, str) else value


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("service.console", "templates"),
        autoescape=True,  # every template, whatever its name
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,  # every value a template prints
    )
    env.filters["when"] = _when
    env.filters["visible"] = _visible
    env.globals["bars"] = charts.bars
    env.globals["stacked"] = charts.stacked
    return env


@dataclass
class Console:
    """The console's collaborators; each page module's routes close over one of these."""

    settings: Settings
    clock: Clock
    sessions: Sessions
    env: Environment
    totals: Totals = field(default_factory=Totals)  # registrations before this hour, counted hourly

    def operations(self, request: Request) -> Operations:
        operations: Operations = request.app.ctx.operations
        return operations

    def ended(self, request: Request) -> EndedSessions:
        """The sessions signed out before they expired, on the rate limiter's store."""
        return EndedSessions(request.app.ctx.limiter.storage)

    def registrations(self, request: Request) -> RegistrationOperations:
        return RegistrationOperations(request.app.ctx.engine)

    def summaries(self, request: Request) -> Summaries:
        return Summaries(request.app.ctx.engine, self.clock, self.totals)

    def attempts(self, request: Request) -> FailedAttempts:
        attempts: FailedAttempts = request.app.ctx.admin_attempts
        return attempts

    def session(self, request: Request) -> Session:
        session: Session = request.ctx.console_session
        return session

    def render(self, request: Request, template: str, *, status: int = 200, **context: Any) -> HTTPResponse:
        """The page, with the session's CSRF token for its forms and any message left for it."""
        session: Session | None = getattr(request.ctx, "console_session", None)
        flash = self.sessions.take_flash(request, session) if session is not None else None
        page = self.env.get_template(template).render(
            csrf=session.csrf if session is not None else "",
            signed_in=session is not None,
            flash=flash,
            path=request.path,
            **context,
        )
        response = html(page, status=status)
        if flash is not None or (session is not None and request.cookies.get("console_flash")):
            self.sessions.clear_flash(response)
        return response

    def done(self, request: Request, to: str, **message: Any) -> HTTPResponse:
        """303 to ``to``, which then says ``message`` (post/redirect/get)."""
        response = redirect(to, status=303)
        self.sessions.flash(response, self.session(request), message)
        return response

    def refused(self, request: Request, error: DomainError, *, back: str) -> HTTPResponse:
        """An action the operations refused: the reason, each field at fault, and a way back."""
        answer = from_domain(error)
        return self.render(
            request,
            "message.html",
            status=int(answer.status_code),
            title="Not done",
            message=error.message,
            errors=error.field_errors,
            back=back,
        )

    def not_found(self, request: Request, what: str = "This page does not exist.") -> HTTPResponse:
        return self.render(
            request, "message.html", status=404, title="Not found", message=what, errors=[], back=PATH
        )


def query(request: Request) -> dict[str, str]:
    """The query string, one value per name; empty values (a form's blank filter) are left out. A
    name given twice, or not UTF-8, is ``InvalidInput``, as on the admin API: never guessed at."""
    return one_each(query_pairs(request.query_string, keep_blank=False))


URLENCODED = "application/x-www-form-urlencoded"


def posted(request: Request) -> Mapping[str, list[str]]:
    """Every value of each field of the posted form, blank ones left out. A urlencoded body (what
    every console form sends) is decoded strictly: a field that is not UTF-8 is
    ``invalid_encoding`` naming it (``InvalidInput``), where Sanic's own reading would store U+FFFD
    in its place, or lose the whole form (its CSRF token too) to one raw byte."""
    cached: Mapping[str, list[str]] | None = getattr(request.ctx, "console_form", None)
    if cached is not None:
        return cached
    content_type, _ = parse_content_header(request.headers.get("content-type", ""))
    if content_type == URLENCODED:
        fields: dict[str, list[str]] = {}
        # Latin-1 maps each byte to one character; query_pairs decodes each field's bytes itself.
        for name, value in query_pairs(request.body.decode("latin-1"), keep_blank=False):
            fields.setdefault(name, []).append(value)
    else:  # no console form sends another type; what Sanic reads of one is all it carries
        fields = dict(request.form or {})
    request.ctx.console_form = fields
    return fields


def form(request: Request) -> dict[str, str]:
    """The posted form, one value per name (the CSRF token left out)."""
    return {name: values[0] for name, values in posted(request).items() if name != CSRF_FIELD and values}


def link(path: str, args: Mapping[str, str | None]) -> str:
    kept = {name: value for name, value in args.items() if value}
    return f"{path}?{urlencode(kept)}" if kept else path


# Form fields a console form sends once per choice (the partner form's event checkboxes); any
# other field given twice is refused.
LISTS = frozenset({"events"})


def guard(bp: Blueprint, console: Console) -> None:
    """Every request: a session (else sign in), and on POST its CSRF token and our origin (else 403);
    every answer: the security headers."""

    async def check(request: Request) -> HTTPResponse | None:
        return await admit(console, request)

    async def on_answer(request: Request, response: HTTPResponse) -> None:
        secure(response)
        count(request, response.status)  # the pages the console answers itself (sign-in, 403s)

    bp.on_request(check, priority=100)
    bp.on_response(on_answer)  # type: ignore[no-untyped-call]


async def admit(console: Console, request: Request, *, forms: bool = True) -> HTTPResponse | None:
    """None to let the request through, else the answer that stops it (sign in, 403, 413).

    Without ``forms`` only the session is checked: a request routing refused carries no form (no
    route read its body) and changes nothing, so its size, origin and CSRF token mean nothing."""
    audit.act_as(f"console:{client_address(request)}")
    if request.path.startswith(OPEN_PATHS):
        # The sign-in form too gets the page, not the JSON every other route answers a body with.
        return too_large(console, request) if forms and _too_large(request) else None
    session = console.sessions.read(request)
    if session is not None and await console.ended(request).ended(session):
        session = None  # signed out: a copy of its cookie is no session
    if session is None:
        if request.method in ("GET", "HEAD"):
            # As RFC 3986 compares paths: a respelled console path (%63onsole) comes back as ours.
            path = unescape_unreserved(request.path)
            target = path + (f"?{request.query_string}" if request.query_string else "")
            if len(target) > MAX_NEXT:  # no console page's address is so long: where it leads, the path
                target = path if len(path) <= MAX_NEXT else PATH
            return redirect(link(PATH + "/login", {"next": target}), status=303)
        if same_origin(request, console.settings.base_url):
            return signed_out(console, request)  # a form of ours, sent after its session ended
        return forbidden(console, request)
    request.ctx.console_session = session
    if request.method in ("GET", "HEAD") or not forms:
        return None
    if _too_large(request):
        return too_large(console, request)
    if not same_origin(request, console.settings.base_url):
        return forbidden(console, request)
    try:
        fields = posted(request)
    except InvalidInput as error:  # the form is ours but its bytes are not text: say so, not "forged"
        return console.refused(request, error, back=PATH)
    if not csrf_matches(next(iter(fields.get(CSRF_FIELD, ())), None), session):
        return forbidden(console, request)
    return given_twice(console, request, back=PATH)


def given_twice(console: Console, request: Request, *, back: str) -> HTTPResponse | None:
    """The 400 page naming each field the form gives more than once (but ``LISTS``), or that is not
    UTF-8, else None: as the admin API refuses a member given twice, the console never guesses
    between two values. The sign-in form, which the guard lets through without a session, asks for
    this itself."""
    try:
        fields = posted(request)
    except InvalidInput as unreadable:
        return console.refused(request, unreadable, back=back)
    repeated = [name for name, values in fields.items() if len(values) > 1 and name not in LISTS]
    if not repeated:
        return None
    message = "This field appears more than once."
    error = InvalidInput(errors=[FieldError(name, "repeated", message) for name in repeated])
    return console.refused(request, error, back=back)


def secure(response: HTTPResponse) -> HTTPResponse:
    """``response`` with the console's security headers, which every console answer carries."""
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response


def unrouted(console: Console) -> Unrouted:
    """The console's answer to what routing refuses under /console (``service.admin.guard`` hands
    it over): an unknown path (404) or a method the path does not take (405, ``Allow`` kept).

    No route took the request, so the blueprint's middleware never ran: this checks the session
    and sets the headers itself. Without a session the answer is the sign-in (GET, HEAD) or 403,
    as on any console path, so neither 404 nor ``Allow`` maps the routes for a stranger (as the
    admin guard checks its token first); with one, the console's own page, never the API's JSON."""

    async def answer(request: Request, exception: SanicException) -> HTTPResponse:
        stopped = await admit(console, request, forms=False)
        page = secure(stopped if stopped is not None else refused_by_routing(console, request, exception))
        count(request, page.status)
        return page

    return answer


def refused_by_routing(console: Console, request: Request, exception: SanicException) -> HTTPResponse:
    """The not-found page, or the page saying the method is not taken, with Sanic's ``Allow``."""
    if not isinstance(exception, MethodNotAllowed):
        return console.not_found(request)
    page = console.render(
        request,
        "message.html",
        status=405,
        title="Not allowed",
        message="This page does not take this method; nothing was changed.",
        errors=[],
        back=PATH,
    )
    page.headers.update(exception.headers or {})  # Allow: the methods the path takes
    return page


# Titles of the page for what a route raised, by status; any other is "Not done".
FAILED_TITLES = {404: "Not found", 405: "Not allowed", 413: "Too large", 503: "Briefly unavailable"}
UNAVAILABLE = "The service is briefly unavailable, so nothing was changed; try again shortly."
INTERNAL = "The server could not complete the request; look at the page again before you repeat it."


def failed(console: Console, request: Request, exception: Exception) -> HTTPResponse:
    """What a console route (or the guard in front of it) raised, as the console's page: the
    status, log line, count and headers the API would give it (``service.handlers.assess``;
    ``Retry-After`` on a 503), the reason in a sentence, and the way back to the page the request
    came from. The database busy or unreachable is 503, saying nothing was changed (the action's
    transaction did not commit); a bug is 500, asking the operator to look before repeating the
    action, since a bug could come after a commit."""
    failure = assess(request, exception)
    if failure.status == 503:
        message = UNAVAILABLE
    elif failure.status >= 500:
        message = INTERNAL
    else:
        message = failure.body["message"]
    page = console.render(
        request,
        "message.html",
        status=failure.status,
        title=FAILED_TITLES.get(failure.status, "Not done"),
        message=message,
        errors=failure.body.get("errors", []),
        back=safe_next(_referring_path(request)),
    )
    page.headers.update(failure.headers)
    return secure(page)


def _too_large(request: Request) -> bool:
    """A body over the service's limit, which Sanic refused to read. It then runs this guard before
    answering 413, and the form that never arrived would read as one without its CSRF token."""
    length = request.headers.get("content-length", "")
    return length.isdigit() and int(length) > request.app.config.REQUEST_MAX_SIZE


def too_large(console: Console, request: Request) -> HTTPResponse:
    limit = request.app.config.REQUEST_MAX_SIZE // 1024
    return console.render(
        request,
        "message.html",
        status=413,
        title="Too large",
        message=f"This form is larger than the service accepts ({limit} KiB); nothing was changed.",
        errors=[],
        back=PATH,
    )


def signed_out(console: Console, request: Request) -> HTTPResponse:
    """A console form sent after its session ended (8 hours on, or signed out in another tab): said
    so, with the way back to the page it came from through sign-in, rather than taken for a
    forged form."""
    return console.render(
        request,
        "message.html",
        status=403,
        title="Signed out",
        message="Your console session has ended, so nothing was changed. Sign in, then send the form again.",
        errors=[],
        back=link(PATH + "/login", {"next": safe_next(_referring_path(request))}),
        back_label="Sign in",
    )


def _referring_path(request: Request) -> str | None:
    """The path of the page the request came from (``Referer``), if it names one."""
    referer = request.headers.get("referer")
    try:
        return urlsplit(referer).path if isinstance(referer, str) else None
    except ValueError:  # not a URL ("http://["): no page to go back to
        return None


def forbidden(console: Console, request: Request) -> HTTPResponse:
    return console.render(
        request,
        "message.html",
        status=403,
        title="Refused",
        message="This form did not come from a console page of this service; nothing was changed.",
        errors=[],
        back=PATH,
    )
