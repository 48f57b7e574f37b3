"""Structured JSON logs: emails masked, secrets never written."""

from __future__ import annotations

import io
import json
import logging

import pytest

from service.logs import ClientFaults, JSONFormatter, config, mask


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


def test_sanics_error_lines_about_what_a_client_sent_are_info():
    """Sanic's ERROR lines that only describe a client's request (a body a GET route never read, a
    form it could not parse) are written at INFO with the error's class and no traceback; its other
    ERROR lines stay errors. The configuration puts the filter on Sanic's error logger."""
    assert config()["loggers"]["sanic.error"]["filters"] == ["client_faults"]
    assert config()["filters"]["client_faults"] == {"()": ClientFaults}
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JSONFormatter())
    errors = logging.Logger("sanic.error")  # not the global one: other tests' logging stays as it is
    errors.addHandler(handler)
    errors.addFilter(ClientFaults())
    errors.error("<Request: GET /healthz> body not consumed.")
    try:
        b"\xff".decode("utf-8")
    except UnicodeDecodeError:
        errors.exception("Failed when parsing form")
    errors.error("Experienced exception while trying to serve")
    lines = [json.loads(line) for line in written.getvalue().splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("info", "<Request: GET /healthz> body not consumed."),
        ("info", "Failed when parsing form"),
        ("error", "Experienced exception while trying to serve"),
    ]
    assert lines[1]["error"] == "UnicodeDecodeError" and "traceback" not in lines[1]
