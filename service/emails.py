"""Checking an email address: email-validator's result, with its verdicts on domains remembered.

email-validator (without DNS) spends about two thirds of a call on the part after the @-sign: IDNA
and Unicode checks, character by character. A waitlist sees the same few domains over and over, so
``validated_email`` takes the plain case (an ASCII address with one @-sign and no quoting, angle
brackets or domain literal) through the steps of ``validate_email``, in its order, with the domain
step's answer cached per domain. Anything else, and any address a step refuses, goes to
``validate_email`` whole, so every refusal is the library's own, with its message.

Those steps live in ``email_validator.syntax`` and ``email_validator.rfc_constants``, which are not
email-validator's public API. They are replayed for speed: a registration costs about 100 µs of
server CPU with them and about 165 µs with ``validate_email`` alone, which takes registrations from
0.56 to 0.34 of a bare handler (``python -m benchmarks.waitlist``, SQLite, one worker). So
pyproject.toml pins email-validator to the one version this was proven on; ``tests/test_emails.py``
fails, naming the step and the version, the day a step moves, and a property test holds
``validated_email`` to ``validate_email``'s whole result on every address it generates.
"""

from __future__ import annotations

import functools

import email_validator
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES
from email_validator.syntax import (
    validate_email_domain_name,
    validate_email_length,
    validate_email_local_part,
)

# Distinct domains remembered; most signups come from a few hundred mail providers.
DOMAIN_CACHE_SIZE = 4096
# Characters that make an address other than plain: quoting, display names, domain literals.
_NOT_PLAIN = frozenset('"<>[]\\')


@functools.lru_cache(maxsize=DOMAIN_CACHE_SIZE)  # a pure function's answers: no state to share
def _domain(domain: str) -> tuple[str, str] | None:
    """The domain's (internationalized, ASCII) forms, or None where email-validator refuses it."""
    try:
        info = validate_email_domain_name(
            domain,
            test_environment=email_validator.TEST_ENVIRONMENT,
            globally_deliverable=email_validator.GLOBALLY_DELIVERABLE,
        )
    except EmailNotValidError:
        return None
    return info["domain"], info["ascii_domain"]


def _is_plain(address: str) -> bool:
    return address.isascii() and address.count("@") == 1 and _NOT_PLAIN.isdisjoint(address)


def _plain(address: str) -> ValidatedEmail | None:
    """``validate_email``'s result for a plain ASCII address, or None to ask it whole."""
    if not _is_plain(address):
        return None
    local, domain = address.split("@")
    if not domain:
        return None
    forms = _domain(domain)
    if forms is None:
        return None
    try:
        # ASCII needs no Unicode normalization, so one pass over the local part is the whole check.
        local_info = validate_email_local_part(
            local,
            allow_smtputf8=email_validator.ALLOW_SMTPUTF8,
            allow_empty_local=email_validator.ALLOW_EMPTY_LOCAL,
            quoted_local_part=False,
            strict=email_validator.STRICT,
        )
    except EmailNotValidError:
        return None
    checked = ValidatedEmail()
    checked.original = address
    checked.display_name = None
    checked.smtputf8 = local_info["smtputf8"]
    checked.local_part = local_info["local_part"]
    checked.ascii_local_part = local_info["ascii_local_part"]
    mailbox = checked.ascii_local_part
    if mailbox is not None and mailbox.lower() in CASE_INSENSITIVE_MAILBOX_NAMES:  # RFC 2142
        checked.ascii_local_part = mailbox.lower()
        checked.local_part = checked.local_part.lower()
    checked.domain, checked.ascii_domain = forms
    checked.normalized = f"{checked.local_part}@{checked.domain}"
    checked.ascii_email = (
        f"{checked.ascii_local_part}@{checked.ascii_domain}" if checked.ascii_local_part else None
    )
    try:
        validate_email_length(checked)
    except EmailNotValidError:
        return None
    return checked


def validated_email(address: str) -> ValidatedEmail:
    """email-validator's result for ``address`` (no DNS): ``normalized``, ``ascii_email`` and the rest.

    Raises ``EmailNotValidError`` (email-validator's, with its message) where the address is not valid.
    """
    return _plain(address) or validate_email(address, check_deliverability=False)


# Greek small letters final sigma and sigma: one letter, written the first at a word's end.
_FINAL_SIGMA, _SIGMA = "\u03c2", "\u03c3"


def caseless(local_part: str) -> str:
    """A local part lower-cased, its final sigma written as any other sigma: Python's ``lower``
    writes a capital sigma at a word's end as a final sigma, so the capitals of a word would not
    key as its small letters do. Only the case is folded: the sharp s stays itself (its capital
    ``SS`` is as much that of ``ss``), so two mailboxes are never made one."""
    return local_part.lower().replace(_FINAL_SIGMA, _SIGMA)


def identity(address: str) -> str:
    """The address as one person's identity: email-validator's normalised local part (Unicode
    NFC, ``caseless``) at the domain's IDNA ASCII form, lower-cased. Raises ``EmailNotValidError``
    where the address is not valid.

    For a plain ASCII address that email-validator accepts this is the address lower-cased (ASCII
    needs no normalisation, and an ASCII domain's IDNA form is itself, lower-cased), so the
    waitlist, which has just checked the address, pays nothing more for it; a test holds the two
    ways to each other.
    """
    if _is_plain(address):
        return address.lower()
    checked = validated_email(address)
    return f"{caseless(checked.local_part)}@{checked.ascii_domain.lower()}"


def check_email(address: str) -> None:
    """Raise ``EmailNotValidError`` (email-validator's, with its message) unless ``address`` is valid."""
    validated_email(address)


def cached_domains() -> int:
    """How many domain verdicts are remembered (for tests and metrics)."""
    return _domain.cache_info().currsize
