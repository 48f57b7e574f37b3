"""Parameters given as strings (query strings, command options): known names, bounded numbers.

The admin routes and the commands read their options through these, so both refuse the same
things with the same field errors (``InvalidInput``), and an unknown parameter is never ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from service.exceptions import FieldError, InvalidInput, invalid
from service.text import CODE as TEXT_CODE
from service.text import text_fault


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
