"""Structured logs: one JSON object per line, emails masked, secrets never written.

The service logs through the standard ``logging`` module; ``configure()`` (called by ``serve`` and
``worker``, in every process) routes Sanic's loggers and the service's through one JSON formatter.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import traceback
from datetime import UTC, datetime
from typing import Any

EMAIL = re.compile(r"([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*@([A-Za-z0-9.-]+\.[A-Za-z]{2,})")
# Keys whose values are never written, whatever a caller passes in `extra=`.
SECRET_KEYS = frozenset(
    {"secret", "secrets", "token", "admin_token", "authorization", "password", "signature"}
)
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def mask(text: str) -> str:
    """``ada@example.com`` → ``a***@example.com``: enough to tell rows apart, not to write to."""
    return EMAIL.sub(r"\1***@\2", text)


def _clean(key: str, value: Any) -> Any:
    if key.lower() in SECRET_KEYS:
        return "[redacted]"
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return mask(str(value))


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                document[key] = _clean(key, value)
        if record.exc_info:
            document["error"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            document["traceback"] = mask("".join(traceback.format_exception(*record.exc_info)))
        return json.dumps(document, ensure_ascii=False, default=str)


class ClientFaults(logging.Filter):
    """Sanic's ERROR lines that only say what a client sent, written as INFO without a traceback.

    Anyone could otherwise fill the error log and page the operator: a GET carrying a body the
    route never reads ("<Request: GET /healthz> body not consumed.") and a form that cannot be
    parsed (its charset or encoding). The request is answered as it was; only the line's level
    changes, and the error's class stays on it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.endswith(" body not consumed.") or message == "Failed when parsing form":
            record.levelno, record.levelname = logging.INFO, "INFO"
            if record.exc_info and record.exc_info[0] is not None:
                record.error = record.exc_info[0].__name__
            record.exc_info = record.exc_text = None
        return True


def config(level: str = "INFO") -> dict[str, Any]:
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    loggers = ("sanic.root", "sanic.error", "sanic.access", "sanic.server", "sanic.websockets", "service")
    configured = {name: {"level": level, "handlers": ["json"], "propagate": False} for name in loggers}
    configured["sanic.error"]["filters"] = ["client_faults"]
    # Database drivers log every statement's parameters at DEBUG, partner secrets included: they
    # are held at WARNING whatever level the service runs at.
    for noisy in ("aiosqlite", "asyncpg", "sqlalchemy", "aiohttp"):
        configured[noisy] = {"level": "WARNING", "handlers": ["json"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JSONFormatter}},
        "filters": {"client_faults": {"()": ClientFaults}},
        "handlers": {"json": handler},
        "loggers": configured,
    }


def configure(level: str = "INFO") -> None:
    logging.config.dictConfig(config(level))
