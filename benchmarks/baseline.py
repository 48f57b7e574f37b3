"""The baseline every benchmark compares with: a bare Sanic app answering constant bytes.

``python -m benchmarks.baseline --port P [--size N]`` serves ``GET /constant`` and
``POST /constant`` with the same N bytes, with nothing else registered: no middleware, no error
handler of ours, no access log. It starts the way ``python -m service serve --workers N`` does
(an ``AppLoader``; one worker: ``Sanic.serve_single``, one process; more: ``Sanic.serve``, a
manager and N workers; the collector tuned as ``serve`` tunes it), so whatever a service route
costs beyond this is the cost of the route itself, not of a different process model.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from sanic import HTTPResponse, Request, Sanic
from sanic.config import Config
from sanic.worker.loader import AppLoader

from service import collector

DEFAULT_SIZE = 13  # len(b"Hello, world!"), the usual hello-world body


def create_app(size: int = DEFAULT_SIZE, name: str = "baseline") -> Sanic[Any, Any]:
    config = Config()
    config.ACCESS_LOG = False
    config.MOTD = False
    app: Sanic[Any, Any] = Sanic(name, config=config)
    body = b"x" * size

    @app.route("/constant", methods=["GET", "POST"])
    async def constant(request: Request) -> HTTPResponse:
        return HTTPResponse(body, content_type="text/plain; charset=utf-8")

    # The same process settings as `serve` gives the service, so only the routes differ.
    app.after_server_start(lambda app: collector.tune())
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baseline", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="bytes in the constant body")
    parser.add_argument("--workers", type=int, default=1, help="server processes, as the service's")
    args = parser.parse_args()
    loader = AppLoader(factory=partial(create_app, args.size))
    app = loader.load()
    single = args.workers == 1
    app.prepare(host=args.host, port=args.port, access_log=False, workers=args.workers, single_process=single)
    if single:
        Sanic.serve_single(primary=app)
    else:
        Sanic.serve(primary=app, app_loader=loader)


if __name__ == "__main__":
    main()
