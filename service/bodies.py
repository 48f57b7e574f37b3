"""Reading request bodies strictly: JSON objects and URL-encoded forms, nothing half-understood.

Every failure is a ``BadRequest`` naming ``body`` (or the repeated field), so a client learns what to
fix and the handler never sees a value it has to guess about.
"""

from __future__ import annotations

import json
from encodings import normalize_encoding
from encodings.aliases import aliases
from typing import Any
from urllib.parse import parse_qsl

from sanic.request import Request

from service.errors import BadRequest, FieldError, PayloadTooLarge, UnsupportedMediaType

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MAX_BODY_BYTES = 64 * 1024  # docs/architecture.md "Waitlist intake": bodies over 64 KiB are refused with 413
# The charsets a body may be labelled with, by Python's name for each (``charset_named``). JSON is
# always UTF-8 (RFC 8259 section 8.1), so only labels its bytes satisfy; a form's percent-escapes
# are decoded in its label's charset (Java's form helpers send ISO-8859-1).
_JSON_CHARSETS = {"utf-8", "ascii"}
_FORM_CHARSETS = {"utf-8", "ascii", "iso8859-1"}


def _body_error(code: str, message: str) -> BadRequest:
    return BadRequest(errors=[FieldError("body", code, message)])


def media_type(request: Request) -> tuple[str, dict[str, str]]:
    header = request.headers.get("content-type", "")
    kind, _, rest = header.partition(";")
    params: dict[str, str] = {}
    for part in rest.split(";"):
        name, _, value = part.partition("=")
        if name.strip():
            params[name.strip().lower()] = value.strip().strip('"').lower()
    return kind.strip().lower(), params


class _NotJson(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``, which Python's decoder reads and JSON has not."""


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


class _Repeated(Exception):
    """A member repeated somewhere in the document: where, is found again (``_repeated_path``)."""


def _first_repeated(pairs: list[tuple[str, Any]]) -> str:
    """The first member name ``pairs`` give twice (they give one)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("no member is repeated")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise _Repeated(_first_repeated(pairs))
    return document


class _RepeatedHere(dict[str, Any]):
    """Stands in for an object with a repeated member, ``key``."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key


def _marking_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    return document if len(document) == len(pairs) else _RepeatedHere(_first_repeated(pairs))


# Valid JSON that Python will not read: an integer of more digits than ``sys.get_int_max_str_digits``
# allows (4,300), or arrays and objects nested deeper than the interpreter's recursion limit.
UNREADABLE_JSON = (
    "The body is JSON this service does not read: a number of too many digits, or nesting too deep."
)
# Built once: json.loads with hooks would construct a new decoder on every call.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_members, parse_constant=_reject_constant)
_MARKING = json.JSONDecoder(object_pairs_hook=_marking_members, parse_constant=_reject_constant)


def _repeated_path(text: str, key: str) -> str:
    """The dotted path (``project.0.intent``) of the first repeated member: the document is read
    once more, only when it is refused, marking each object with a repeated member; ``key`` alone
    if that reading fails (a document nested too deep after the repetition)."""
    try:
        found: list[tuple[tuple[str, ...], Any]] = [((), _MARKING.decode(text))]
    except (ValueError, RecursionError):
        return key
    while found:
        path, value = found.pop()
        if isinstance(value, _RepeatedHere):
            return ".".join((*path, value.key))
        if isinstance(value, dict):
            found.extend(((*path, name), member) for name, member in reversed(value.items()))
        elif isinstance(value, list):
            found.extend(((*path, str(at)), item) for at, item in reversed(list(enumerate(value))))
    return key


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _body_error("invalid_encoding", "The body is not valid UTF-8.") from None
    try:
        document = _DECODER.decode(text)
    except _Repeated as repeated:
        field = _repeated_path(text, str(repeated.args[0]))
        message = "This member appears more than once."
        raise BadRequest(errors=[FieldError(field, "repeated", message)]) from None
    except (json.JSONDecodeError, _NotJson):
        raise _body_error("invalid_json", "The body is not valid JSON.") from None
    except (ValueError, RecursionError):  # Python's bound on an integer's digits, or on nesting
        raise _body_error("invalid_json", UNREADABLE_JSON) from None
    if not isinstance(document, dict):
        raise _body_error("invalid_type", "The body must be a JSON object.")
    return document


def parse_form(raw: bytes, charset: str = "utf-8") -> dict[str, str]:
    """A URL-encoded form parsed as browsers parse one (the WHATWG URL standard): empty pieces (a
    trailing ``&``) are skipped and a name without ``=`` has the empty value; a name given twice is
    refused, never resolved."""
    try:
        text = raw.decode(charset)  # percent-escaped, or (as curl sends) the characters' own bytes
        pairs = parse_qsl(text, keep_blank_values=True, encoding=charset, errors="strict")
    except UnicodeDecodeError:
        raise _body_error("invalid_encoding", f"The form is not valid {_LABELS[charset]}.") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:
            raise BadRequest(errors=[FieldError(key, "repeated", "This field appears more than once.")])
        form[key] = value
    return form


_LABELS = {"utf-8": "UTF-8", "ascii": "US-ASCII", "iso8859-1": "ISO-8859-1"}


# Every label Python's codecs know for the three charsets, spelled as ``normalize_encoding`` spells
# one, to Python's name for it. Read from this table, never by ``codecs.lookup``: that raises more
# than LookupError on a client's label (NUL, bytes that are not UTF-8) and remembers every label it
# did not know, for good.
_CODEC_NAMES = {"utf_8": "utf-8", "ascii": "ascii", "latin_1": "iso8859-1"}
_CHARSETS = _CODEC_NAMES | {
    alias: _CODEC_NAMES[codec] for alias, codec in aliases.items() if codec in _CODEC_NAMES
}


def charset_named(label: str) -> str | None:
    """Python's name for a charset label (``UTF8``, ``latin-1``, ``us-ascii``) of the three a body
    may be in, or None for any other label: a label with a control character or one that is not
    ASCII names none (``normalize_encoding`` would read ``utf-8\x00`` as ``utf_8``)."""
    if not (label.isascii() and label.isprintable()):
        return None
    spelled = normalize_encoding(label.lower())
    return _CHARSETS.get(spelled) or _CHARSETS.get(spelled.replace(".", "_"))


def read_body(request: Request, *, form: bool = True) -> dict[str, Any]:
    """The request's JSON object (or form, where allowed), or the error that explains why not."""
    raw = request.body or b""
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    # Every line of the field, as one list (RFC 9110 section 5.3): "identity" on the first line
    # and "gzip" on the second is a gzip-labelled body.
    codings = {
        coding.strip().lower()
        for line in request.headers.getall("content-encoding", ())
        for coding in line.split(",")
    }
    if codings - {"", "identity"}:
        # Never decoded: a gzip-labelled body read as it stands would be stored as the wrong bytes,
        # or refused as JSON it would have been once decoded (RFC 9110 section 8.4: 415).
        raise UnsupportedMediaType("Send the body without a Content-Encoding.")
    if len(request.headers.getall("content-type", ())) > 1:
        # One field by definition (RFC 9110 section 8.3): a proxy reading the last could see
        # another body than the service reading the first.
        raise UnsupportedMediaType("Send one Content-Type.")
    kind, params = media_type(request)
    accepted = (JSON, FORM) if form else (JSON,)
    if kind not in accepted:
        # Where forms are refused too (the admin routes), the answer does not offer one.
        raise UnsupportedMediaType() if form else UnsupportedMediaType("Send application/json.")
    charset = charset_named(params.get("charset", "utf-8"))
    if charset not in (_JSON_CHARSETS if kind == JSON else _FORM_CHARSETS):
        message = "Send JSON in UTF-8." if kind == JSON else "Send the form in UTF-8, US-ASCII or ISO-8859-1."
        raise UnsupportedMediaType(message)
    if not raw.strip():
        raise _body_error("empty", "A request body is required.")
    if kind == JSON:
        return parse_json_object(raw)
    return parse_form(raw, charset)


def read_no_body(request: Request) -> None:
    """Nothing, for a route that takes no input: no body, or an empty JSON object. A member is
    refused, never ignored: one meant to narrow the action (``{"deliveryId": ...}`` on a partner's
    retry) would otherwise see the whole action run."""
    if not (request.body or b"").strip():
        return
    members = read_body(request, form=False)
    if members:
        message = "This route takes no body members."
        raise BadRequest(errors=[FieldError(name, "unknown_field", message) for name in members])
