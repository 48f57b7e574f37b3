"""The one rule for text the service stores: no NUL, nothing UTF-8 cannot carry.

PostgreSQL refuses NUL in text and UTF-8 has no lone surrogates (JSON can still spell one, as
``"\\ud800"``), so a value breaking either rule would fail in the database as a server error.
Registrations, partners, events and admin query parameters are all held to it here, before
storage, and the client is told which field to fix. What a partner answers is not refused but
made readable (``readable``): the attempt log keeps an excerpt of it, whatever it held.
"""

from __future__ import annotations

import re
import unicodedata

from pydantic_core import PydanticCustomError

CODE = "invalid_characters"
NUL_MESSAGE = "This field contains a NUL character."
NOT_UNICODE_MESSAGE = "This field contains characters that are not valid Unicode."
# C0 controls (NUL among them), DEL and C1 controls, each shown as U+FFFD; so are the marks,
# embeddings, overrides and isolates that reorder text on screen, and the line and paragraph
# separators: a partner's answer could otherwise print in an order it was not written in.
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]
_CONTROLS = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0), *_BIDI], "\ufffd")
# The same characters as one class: a search in C, where ``str.translate`` looks each character up
# in the mapping (19 µs for 248 characters of indented JSON, against 1).
_CONTROL = re.compile("[" + "".join(f"\\u{code:04x}" for code in sorted(_CONTROLS)) + "]")


def text_fault(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, as a sentence for the client; None if it can."""
    if "\x00" in value:
        return NUL_MESSAGE
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return NOT_UNICODE_MESSAGE
    return None


LINE_MESSAGE = "This field must be one line of text, without control characters or marks that reorder it."


# What JSON Schema can say of ``line_fault`` and ``lines_fault``: the same characters refused, as a
# "pattern" (ECMA-262; a lone surrogate is refused too, but no UTF-8 JSON can hold one).
_REFUSED = "\\u007f-\\u009f\\u061c\\u200e\\u200f\\u2028-\\u202e\\u2066-\\u2069"
LINE_PATTERN = f"^[^\\u0000-\\u001f{_REFUSED}]*$"
LINES_PATTERN = f"^(?:[^\\u0000-\\u0008\\u000b-\\u001f{_REFUSED}]|\\r\\n)*$"


def line_fault(value: str) -> str | None:
    """Why ``value`` cannot be a one-line label (a partner's name, shown in listings, pages and
    metrics), as a sentence for the client; None if it can. Besides ``text_fault``: no control
    character, line break or mark that reorders text on screen."""
    fault = text_fault(value)
    if fault is None and any(ord(char) in _CONTROLS for char in value):
        return LINE_MESSAGE
    return fault


LINES_MESSAGE = (
    "This field must be text without control characters other than line breaks and tabs, "
    "or marks that reorder it."
)


def lines_fault(value: str) -> str | None:
    """Why ``value`` cannot be free text of several lines (a registration's message, shown in the
    console and exported), as a sentence for the client; None if it can. ``line_fault``'s rule,
    except that it may hold tabs and line breaks: a line feed, or a carriage return and line feed as
    browsers send a text area's lines. A carriage return alone, which lets text overwrite what a
    terminal shows before it, is refused."""
    fault = text_fault(value)
    lines = value.replace("\r\n", "\n")
    if fault is None and any(ord(char) in _CONTROLS and char not in "\n\t" for char in lines):
        return LINES_MESSAGE
    return fault


def storable(value: str) -> str:
    """A pydantic validator: ``value`` unchanged, or an ``invalid_characters`` error saying why not."""
    fault = text_fault(value)
    if fault is not None:
        raise PydanticCustomError(CODE, fault)
    return value


# Characters that hide or reorder text on screen: controls (Cc), format characters (Cf: the marks,
# embeddings, overrides and isolates, zero-width ones, tags), the line and paragraph separators
# (Zl, Zp) and lone surrogates (Cs). Every character ``line_fault`` refuses is one of them.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
# The characters worth a look up of their category: all but printable ASCII, tab and line feed.
_SUSPECT = re.compile(r"[^\t\n\x20-\x7e]")


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN


def readable(text: str) -> str:
    """``text`` with every character that hides or reorders it (NUL, escape sequences, line
    breaks, the marks that reorder text, zero-width and other format characters) as U+FFFD, and
    any lone surrogate too: safe to store in either database and to print in a terminal."""
    text = unicode_only(_CONTROL.sub("\ufffd", text))
    if text.isascii():
        return text
    # Only the characters beyond ASCII (but the marks just made) need their category looked up:
    # a line break made the text non-ASCII, and every character of it went through Python (56 µs
    # for 248 characters of indented JSON), where the search alone takes 1.
    return _BEYOND_ASCII.sub(_marked, text)


_BEYOND_ASCII = re.compile("[^\x00-\x7f\ufffd]")


def _marked(found: re.Match[str]) -> str:
    return "\ufffd" if _hidden(found[0]) else found[0]


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _hidden(char):
        return char
    code = ord(char)
    if code > 0xFFFF:  # JSON spells a character beyond the BMP as a surrogate pair (RFC 8259 §7)
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with each character that hides or reorders it on screen written as its
    ``\\uXXXX`` escape (JSON's spelling), tabs and line feeds kept: what a page shows of stored
    text, so two values that look alike are told apart and none reads in an order it was not
    written in."""
    return _SUSPECT.sub(_escape, text)


def unicode_only(text: str) -> str:
    """``text`` with a NUL or a lone surrogate as U+FFFD and the rest as it was (line breaks
    included): text UTF-8 can carry, for a page that shows back what a client sent."""
    if text_fault(text) is None:
        return text
    return "".join("\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char for char in text)
