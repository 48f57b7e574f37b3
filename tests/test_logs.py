"""Structured JSON logs: emails masked, secrets never written."""

from __future__ import annotations

import json
import logging

import pytest

from service.logs import JSONFormatter, mask


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ada@example.com", "a***@example.com"),
        ("from Bob.Smith+x@mail.example.org today", "from B***@mail.example.org today"),
        ("no address here", "no address here"),
        ("a@b", "a@b"),
    ],
)
def test_mask(text, expected):
    """Addresses keep their first character and domain; everything else stays as written."""
    assert mask(text) == expected


def _format(message: str, *args: object, exc: BaseException | None = None, **extra: object) -> dict:
    record = logging.LogRecord("service.test", logging.WARNING, __file__, 1, message, args, None)
    if exc is not None:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    for key, value in extra.items():
        setattr(record, key, value)
    return json.loads(JSONFormatter().format(record))


def test_record_is_one_json_object_with_masked_email():
    """A record becomes one JSON object; an address in the message or in extras is masked."""
    line = _format("registered %s", "ada@example.com", partner="prt_1", email="bob@example.com", attempt=2)
    assert {k: v for k, v in line.items() if k != "time"} == {
        "level": "warning",
        "logger": "service.test",
        "message": "registered a***@example.com",
        "partner": "prt_1",
        "email": "b***@example.com",
        "attempt": 2,
    }


@pytest.mark.parametrize("key", ["secret", "token", "authorization", "Signature", "admin_token"])
def test_secret_keys_are_redacted(key):
    """Whatever a caller passes under a secret-looking key is never written."""
    line = _format("rotated", **{key: "whsec_supersecretvalue"})
    assert line[key] == "[redacted]"
    assert "supersecretvalue" not in json.dumps(line)


def test_exception_is_logged_with_its_class():
    """An exception's class and masked traceback are fields of the same line."""
    try:
        raise ValueError("bad input from ada@example.com")
    except ValueError as error:
        line = _format("failed", exc=error)
    assert line["error"] == "ValueError"
    assert "a***@example.com" in line["traceback"] and "ada@example.com" not in line["traceback"]
