"""The read-only routes: discovery documents, ``/api/v1``, the catalog, its event documents, partner pages.

Each handler holds its rendered document, so a request is a header compare and a response built
from precomputed bytes and headers. Every route answers GET and HEAD.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote

from sanic import Blueprint, HTTPResponse, Request, redirect
from sanic.exceptions import MethodNotAllowed, SanicException
from sanic.exceptions import NotFound as SanicNotFound

from service.discovery.caching import CachedDocument, respond
from service.discovery.documents import Discovery
from service.discovery.surfaces import API_DOCUMENTS, DOCUMENTS, SITEMAP, url
from service.errors import NotFound
from service.handlers import error_response
from service.partner_docs import ROOT as PARTNER_ROOT
from service.paths import unescape_unreserved

Handler = Callable[..., Coroutine[Any, Any, HTTPResponse]]
READ = ("GET", "HEAD")
EVENT_SCHEMA_ROUTE = "/api/v1/webhooks/events/<event_id:str>"


def _serve(document: CachedDocument) -> Handler:
    async def serve(request: Request) -> HTTPResponse:
        return respond(request, document)

    return serve


def _moved_to(request: Request, path: str) -> HTTPResponse:
    """308 to ``path``, written from the base URL like every absolute URL the service gives: a
    proxy serving the service under a path of its own (``https://example.com/waitlist``) strips
    it before the service sees the request, so a Location of the path alone would leave it."""
    return redirect(url(request.app.ctx.settings.base_url, path), status=308)


def _serve_folder(document: CachedDocument) -> Handler:
    """The partner index: a folder, whose address ends with one slash so its relative links resolve
    inside it. Sanic's routing also hands it ``/docs/webhooks//``, where they would not: that, and
    any other spelling, is sent to the one address."""

    async def serve(request: Request) -> HTTPResponse:
        if request.path != PARTNER_ROOT:
            return _moved_to(request, PARTNER_ROOT)
        return respond(request, document)

    return serve


def _moved(path: str) -> Handler:
    async def moved(request: Request) -> HTTPResponse:
        return _moved_to(request, path)

    return moved


def _routed(request: Request, path: str) -> bool:
    """Whether routing takes ``path`` for this request's method: a plain path, no ``.`` or ``..``
    segment (which a client would resolve to somewhere else entirely)."""
    if any(segment in (".", "..") for segment in path.split("/")):
        return False
    try:
        request.app.router.get(path, request.method, request.headers.get("host"))
    except (SanicNotFound, MethodNotAllowed):
        return False
    return True


async def respelled(request: Request, exception: SanicException) -> HTTPResponse:
    """What routing refused, unless only the spelling of the path stood in the way: a read of
    ``/llms%2Etxt``, which RFC 3986 section 6.2.2.2 makes ``/llms.txt``, is a 308 there (its query
    kept). Only a path some route takes once unescaped is respelled; anything else, and every
    other escape (``%2F`` is not ``/``), stays the refusal it was."""
    if isinstance(exception, SanicNotFound) and request.method in READ:
        spelled = unescape_unreserved(request.path)
        if spelled != request.path and _routed(request, spelled):
            query = f"?{request.query_string}" if request.query_string else ""
            return _moved_to(request, spelled + query)
    return error_response(request, exception)


def create_blueprint(discovery: Discovery) -> Blueprint:
    bp = Blueprint("discovery")
    for surface in (*DOCUMENTS, *API_DOCUMENTS):
        if surface is not SITEMAP:
            document = discovery.documents[surface.path]
            bp.add_route(_serve(document), surface.path, methods=READ, name=surface.key)

    async def sitemap(request: Request) -> HTTPResponse:
        return respond(request, await discovery.sitemap.current(request.app.ctx.engine))

    events = discovery.event_documents

    async def event_schema(request: Request, event_id: str) -> HTTPResponse:
        document = events.get(event_id)
        if document is None:
            # Sanic hands the id over still percent-encoded, and ``room%2Eclaimed`` is ``room.claimed``
            # (RFC 9110 4.2.3): decoded on a miss only. No kind holds a reserved character, so a
            # decoded ``/``, NUL or byte that is not UTF-8 names nothing.
            document = events.get(unquote(event_id))
        if document is None:
            raise NotFound("No event kind with this id is in the catalog.")
        return respond(request, document)

    for number, (path, document) in enumerate(discovery.partner_pages.items()):
        serve = _serve_folder(document) if path == PARTNER_ROOT else _serve(document)
        bp.add_route(serve, path, methods=READ, name=f"partnerPage{number}", strict_slashes=True)
        if path != PARTNER_ROOT:
            # A page is a file, not a folder: with a slash after it, its relative links would
            # resolve one level too deep, so that spelling is sent to the page's one address.
            bp.add_route(
                _moved(path), path + "/", methods=READ, name=f"partnerPageSlash{number}", strict_slashes=True
            )

    bare = PARTNER_ROOT.rstrip("/")
    bp.add_route(_moved(PARTNER_ROOT), bare, methods=READ, name="partnerIndex", strict_slashes=True)
    bp.add_route(sitemap, SITEMAP.path, methods=READ, name=SITEMAP.key)
    bp.add_route(event_schema, EVENT_SCHEMA_ROUTE, methods=READ, name="webhookEventSchema")
    return bp
