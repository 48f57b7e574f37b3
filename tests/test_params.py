"""Query strings as the admin API and the console read them (``service.params.query_pairs``)."""

from __future__ import annotations

import pytest

from service.exceptions import InvalidInput
from service.params import query_pairs


@pytest.mark.parametrize(
    ("query", "keep_blank", "pairs"),
    [
        ("a=1&b=x+y&c=%C3%A9", True, [("a", "1"), ("b", "x y"), ("c", "\u00e9")]),
        ("a=&b&c=1", True, [("a", ""), ("b", ""), ("c", "1")]),
        ("a=&b&c=1", False, [("c", "1")]),
        ("a=1&a=2", True, [("a", "1"), ("a", "2")]),  # repeats are the caller's to refuse
        ("e=%E2%82%AC%40x.com", True, [("e", "\u20ac@x.com")]),
        ("", True, []),
    ],
)
def test_pairs_are_percent_decoded_as_utf8(query: str, keep_blank: bool, pairs: list[tuple[str, str]]) -> None:
    assert query_pairs(query, keep_blank=keep_blank) == pairs


def test_every_pair_that_is_not_utf8_is_named() -> None:
    with pytest.raises(InvalidInput) as raised:
        query_pairs("ok=1&email=a%FF%40x.com&%C3=1&lone=%ED%A0%80", keep_blank=True)
    assert [(error.field, error.code) for error in raised.value.field_errors] == [
        ("email", "invalid_encoding"),
        ("\ufffd", "invalid_encoding"),
        ("lone", "invalid_encoding"),  # an encoded surrogate is no UTF-8
    ]
