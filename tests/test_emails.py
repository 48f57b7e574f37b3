"""``check_email`` gives email-validator's verdict on every address, and remembers domains."""

from __future__ import annotations

import pytest
from email_validator import EmailNotValidError, validate_email
from hypothesis import given, settings
from hypothesis import strategies as st

from service import emails
from service.emails import check_email


def library_accepts(address: str) -> bool:
    try:
        validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return False
    return True


def accepts(address: str) -> bool:
    try:
        check_email(address)
    except EmailNotValidError:
        return False
    return True


LOCAL_64 = "l" * 64
CASES = [
    ("plain", "someone@example.com", True),
    ("subdomains and digits", "a.b-c+d_e@mail2.example.co.uk", True),
    ("case-insensitive mailbox", "PostMaster@example.com", True),
    ("IDNA in ASCII form", "a@xn--bcher-kva.example", True),
    ("unicode domain", "a@bücher.example", True),
    ("unicode local part", "jörg@example.com", True),
    ("local part of 65 (only strict mode refuses it)", f"{LOCAL_64}l@example.com", True),
    ("254 characters", f"{LOCAL_64}@{'d' * 60}.{'e' * 60}.{'f' * 60}.gg.com", True),
    ("255 characters", f"{LOCAL_64}@{'d' * 60}.{'e' * 60}.{'f' * 60}.ggg.com", False),
    ("255 characters once the domain is decoded", f"{LOCAL_64}@{'d' * 60}.{'e' * 60}.{'f' * 55}.xn--bcher-kva.com", None),
    ("no @", "someone.example.com", False),
    ("two @", "a@b@example.com", False),
    ("empty local part", "@example.com", False),
    ("empty domain", "someone@", False),
    ("leading dot", ".a@example.com", False),
    ("double dot", "a..b@example.com", False),
    ("space", "a b@example.com", False),
    ("quoted local part", '"a b"@example.com', False),
    ("display name", "Someone <someone@example.com>", False),
    ("domain literal", "a@[192.0.2.1]", False),
    ("single label", "a@example", False),
    ("special-use: localhost", "a@localhost", False),
    ("special-use: .test", "a@mail.test", False),
    ("special-use: .invalid", "a@x.invalid", False),
    ("hyphen at a label's start", "a@-example.com", False),
    ("numeric top-level domain", "a@example.123", False),
    ("full-width at-sign", "a\uff20example.com", False),
    ("backslash", "a\\b@example.com", False),
]


@pytest.mark.parametrize(("address", "valid"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_verdict_is_email_validators(address: str, valid: bool | None) -> None:
    """Each tricky form gets the library's verdict (and, where the table gives one, that one)."""
    assert accepts(address) == library_accepts(address)
    if valid is not None:
        assert accepts(address) is valid


def test_a_refusal_carries_the_librarys_message() -> None:
    """What the client is told comes from email-validator, not from a second opinion."""
    with pytest.raises(EmailNotValidError) as refused:
        check_email("a@localhost")
    with pytest.raises(EmailNotValidError) as expected:
        validate_email("a@localhost", check_deliverability=False)
    assert str(refused.value) == str(expected.value)


# Pieces that steer addresses towards every branch: quoting, brackets, IDNA, special-use names.
PIECES = st.sampled_from([*'abcXYZ019.-_+@"<>[] \\()ü\uff20é', "xn--", "localhost", ".test", "@example.com"])
LABELS = st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True)


@settings(max_examples=800, deadline=None)
@given(
    st.one_of(
        st.emails(),
        st.lists(PIECES, max_size=30).map("".join),
        st.builds(lambda local, labels: f"{local}@{'.'.join(labels)}",
                  st.text(st.characters(codec="ascii"), max_size=70), st.lists(LABELS, min_size=1, max_size=5)),
        st.builds(lambda local, labels: f"{local}@{'.'.join(labels)}",
                  st.text(max_size=70), st.lists(LABELS, min_size=1, max_size=70)),
    )
)
def test_every_generated_address_gets_the_librarys_verdict(address: str) -> None:
    """Whatever the address, the cached path and email-validator agree."""
    assert accepts(address) == library_accepts(address)


def test_a_domain_is_checked_once_then_remembered() -> None:
    """The second address at a domain reuses the first one's verdict."""
    domain = "remembered-domain.example"
    check_email(f"first@{domain}")
    hits = emails._domain.cache_info().hits
    check_email(f"second@{domain}")
    assert emails._domain.cache_info().hits == hits + 1
