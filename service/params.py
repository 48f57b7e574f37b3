"""Parameters given as strings (query strings, command options): known names, bounded numbers.

The admin routes and the commands read their options through these, so both refuse the same
things with the same field errors (``InvalidInput``), and an unknown parameter is never ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from urllib.parse import parse_qsl

from service.exceptions import FieldError, InvalidInput, invalid
from service.text import CODE as TEXT_CODE
from service.text import text_fault


def query_pairs(query_string: str, *, keep_blank: bool) -> list[tuple[str, str]]:
    """The query string's names and values, in order, percent-decoded as UTF-8 (``+`` a space). A
    pair that is not UTF-8 is ``invalid_encoding`` naming its parameter, never read with
    replacement characters: an address to erase would then match nothing and say so with a 0."""
    pairs = []
    refused = []
    # Decoded as Latin-1 first, which maps every byte to one character, so each pair's bytes can
    # then be decoded strictly on their own.
    for latin_name, latin_value in parse_qsl(query_string, keep_blank_values=keep_blank, encoding="latin-1"):
        name, value = latin_name.encode("latin-1"), latin_value.encode("latin-1")
        try:
            pairs.append((name.decode("utf-8"), value.decode("utf-8")))
        except UnicodeDecodeError:
            shown = name.decode("utf-8", errors="replace")
            refused.append(FieldError(shown, "invalid_encoding", "This parameter is not valid UTF-8."))
    if refused:
        raise InvalidInput(errors=refused)
    return pairs


def one_each(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``pairs`` as one value per name; a name given twice is ``repeated`` (``InvalidInput``),
    never guessed at."""
    args: dict[str, str] = {}
    for name, value in pairs:
        if name in args:
            message = "This parameter appears more than once."
            raise InvalidInput(errors=[FieldError(name, "repeated", message)])
        args[name] = value
    return args


def refuse_unknown(args: Mapping[str, object], known: Collection[str]) -> None:
    unknown = [name for name in args if name not in known]
    if unknown:
        message = "This parameter is not accepted."
        raise InvalidInput(errors=[FieldError(name, "unknown_parameter", message) for name in unknown])


def refuse_unknown_members(document: Mapping[str, object], known: Collection[str]) -> None:
    """A body's members that are not ``known``, refused naming each as every body is
    (``unknown_field``): a query's unknown names are parameters, a body's are members."""
    unknown = [name for name in document if name not in known]
    if unknown:
        message = "This member is not accepted."
        raise InvalidInput(errors=[FieldError(name, "unknown_field", message) for name in unknown])


def ascii_whole(text: str) -> int | None:
    """``text`` as a whole number if it is ASCII digits that ``int`` converts (at most
    ``sys.get_int_max_str_digits()`` of them), else None: ``²`` and Arabic-Indic digits pass
    ``isdigit`` and are no number here."""
    if not (text.isascii() and text.isdigit()):
        return None
    try:
        return int(text)
    except ValueError:  # more digits than Python converts
        return None


def whole_number(args: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """A whole number in ``[low, high]`` written in ASCII digits, or ``default`` when absent."""
    text = args.get(name)
    if text is None:
        return default
    number = ascii_whole(text)
    if number is None or not low <= number <= high:
        raise invalid(name, "invalid", f"Must be a whole number from {low} to {high}.")
    return number


def text(args: Mapping[str, str], name: str) -> str | None:
    """The parameter as given, or None when absent; text the database could not hold is refused."""
    value = args.get(name)
    if value is not None and (fault := text_fault(value)) is not None:
        raise invalid(name, TEXT_CODE, fault)
    return value


def filter_text(args: Mapping[str, str], name: str) -> str | None:
    """A filter's value as ``text`` reads it; a blank one (``?partner=``, ``--partner ''``) is
    refused like ``?status=``: read as given it matches nothing, and an empty listing would say
    that nothing matched a filter the client meant to leave out."""
    value = text(args, name)
    if value is not None and not value.strip():
        raise invalid(name, "invalid", "Must not be blank; leave the parameter out to list every one.")
    return value
