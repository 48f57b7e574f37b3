"""``validated_email`` gives email-validator's result on every address, and remembers domains."""

from __future__ import annotations

import inspect
import unicodedata

import email_validator
import pytest
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
from hypothesis import given, settings
from hypothesis import strategies as st

from service import emails
from service.emails import check_email, identity, validated_email
from tests.pins import exact_pin


def library_result(address: str) -> ValidatedEmail | str:
    """validate_email's result, or its refusal's message."""
    try:
        return validate_email(address, check_deliverability=False)
    except EmailNotValidError as refused:
        return str(refused)


def our_result(address: str) -> ValidatedEmail | str:
    try:
        return validated_email(address)
    except EmailNotValidError as refused:
        return str(refused)


def library_accepts(address: str) -> bool:
    return isinstance(library_result(address), ValidatedEmail)


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
    ("case-insensitive mailbox name, lower-cased", "PostMaster@Example.COM", True),
    ("IDNA in ASCII form, upper case", "A@XN--BCHER-KVA.example", True),
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
    """Each tricky form gets the library's verdict and result (and, where the table gives one, that verdict)."""
    assert accepts(address) == library_accepts(address)
    assert our_result(address) == library_result(address)
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
    """Whatever the address, the cached path and email-validator agree: verdict, message and every field."""
    assert accepts(address) == library_accepts(address)
    assert our_result(address) == library_result(address)


def test_the_normalised_forms_are_the_librarys() -> None:
    """An IDNA domain and a case-insensitive mailbox come back as email-validator normalises them."""
    checked = validated_email("PostMaster@XN--BCHER-KVA.example")
    assert (checked.normalized, checked.ascii_email, checked.smtputf8) == (
        "postmaster@bücher.example",
        "postmaster@xn--bcher-kva.example",
        False,
    )


# email-validator's steps service.emails replays (not its public API), with the parameters it passes.
REPLAYED = {
    "email_validator.syntax.validate_email_domain_name": ["domain", "test_environment", "globally_deliverable"],
    "email_validator.syntax.validate_email_local_part": ["local", "allow_smtputf8", "allow_empty_local", "quoted_local_part", "strict"],
    "email_validator.syntax.validate_email_length": ["addrinfo"],
    "email_validator.rfc_constants.CASE_INSENSITIVE_MAILBOX_NAMES": None,
}


def test_email_validator_is_the_pinned_version_whose_steps_are_replayed() -> None:
    """The installed email-validator is the one pyproject.toml pins, and the steps replayed are where they were."""
    pinned = exact_pin("email-validator")
    assert pinned, "pyproject.toml must pin email-validator exactly (==): service.emails replays its internals"
    assert email_validator.__version__ == pinned, (
        f"service.emails replays email-validator {pinned}'s internal steps ({', '.join(REPLAYED)}); "
        f"email-validator {email_validator.__version__} is installed. Run tests/test_emails.py and "
        "python -m benchmarks.waitlist on it, then move the pin in pyproject.toml."
    )
    for name, parameters in REPLAYED.items():
        module, _, attribute = name.rpartition(".")
        found = getattr(__import__(module, fromlist=[attribute]), attribute, None)
        assert found is not None, f"{name} is gone from email-validator {email_validator.__version__}"
        if parameters is not None:
            assert list(inspect.signature(found).parameters) == parameters, (
                f"{name} changed its parameters in email-validator {email_validator.__version__}"
            )


def test_a_domain_is_checked_once_then_remembered() -> None:
    """The second address at a domain reuses the first one's verdict."""
    domain = "remembered-domain.example"
    check_email(f"first@{domain}")
    hits = emails._domain.cache_info().hits
    check_email(f"second@{domain}")
    assert emails._domain.cache_info().hits == hits + 1


def library_identity(address: str) -> str | None:
    """The identity from email-validator's whole result: NFC local part @ IDNA ASCII domain, lower-cased."""
    try:
        checked = validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return None
    return f"{checked.local_part}@{checked.ascii_domain}".lower()


def our_identity(address: str) -> str | None:
    try:
        return identity(address)
    except EmailNotValidError:
        return None


@settings(max_examples=800, deadline=None)
@given(
    st.one_of(
        st.emails(),
        st.builds(lambda local, labels: f"{local}@{'.'.join(labels)}",
                  st.text(st.characters(codec="ascii"), max_size=70), st.lists(LABELS, min_size=1, max_size=5)),
        st.builds(lambda local, labels: f"{local}@{'.'.join(labels)}",
                  st.text(max_size=30), st.lists(LABELS, min_size=1, max_size=5)),
    )
)
def test_the_fast_identity_is_the_one_from_the_librarys_whole_result(address: str) -> None:
    """For every address email-validator accepts, the plain-address shortcut gives its identity."""
    expected = library_identity(address)
    if expected is not None:
        assert our_identity(address) == expected


@pytest.mark.parametrize(
    "spellings",
    [
        [unicodedata.normalize("NFC", "josé@example.com"), unicodedata.normalize("NFD", "josé@example.com"),
         unicodedata.normalize("NFD", "JOSÉ@Example.COM")],
        ["ada@bücher.example", "ada@xn--bcher-kva.example", "Ada@BÜCHER.example", "ADA@XN--BCHER-KVA.EXAMPLE"],
        ["PostMaster@example.com", "postmaster@EXAMPLE.com"],
    ],
)  # fmt: skip
def test_every_spelling_of_one_address_is_one_identity(spellings: list[str]) -> None:
    """NFC and NFD, Unicode and punycode domains, any case: one identity."""
    assert len({identity(spelling) for spelling in spellings}) == 1
