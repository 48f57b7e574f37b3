"""Request paths as RFC 3986 compares them: what two spellings of one path have in common."""

from __future__ import annotations

import re
import string

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")  # RFC 3986 section 2.3


def unescape_unreserved(path: str) -> str:
    """``path`` with each percent-escape of an unreserved character written as the character
    (RFC 3986 section 6.2.2.2: ``%2E`` is ``.``, ``%7e`` is ``~``, ``%61dmin`` is ``admin``); every
    other escape is kept as it is, since ``%2F`` is not ``/`` and ``%00`` names nothing."""

    def character(escape: re.Match[str]) -> str:
        decoded = chr(int(escape[1], 16))
        return decoded if decoded in _UNRESERVED else escape[0]

    return _ESCAPE.sub(character, path)
