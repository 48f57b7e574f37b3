"""Checking an email address: email-validator's verdict, with its verdicts on domains remembered.

email-validator (without DNS) spends about two thirds of a call on the part after the @-sign: IDNA
and Unicode checks, character by character. A waitlist sees the same few domains over and over, so
``check_email`` takes the plain case (an ASCII address with one @-sign and no quoting, angle brackets
or domain literal) through email-validator's own steps, in ``validate_email``'s order, with the
domain step's answer cached per domain. Anything else, and any address a step refuses, goes to
``validate_email`` whole, so every refusal is the library's own, with its message. A property test
holds ``check_email`` and ``validate_email`` to the same verdict on every address it generates.
"""

from __future__ import annotations

import functools

import email_validator
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
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


def _plain_address_is_valid(address: str) -> bool:
    if not address.isascii() or address.count("@") != 1 or not _NOT_PLAIN.isdisjoint(address):
        return False
    local, domain = address.split("@")
    if not domain:
        return False
    forms = _domain(domain)
    if forms is None:
        return False
    try:
        # ASCII needs no Unicode normalization, so one pass over the local part is the whole check.
        local_info = validate_email_local_part(
            local,
            allow_smtputf8=email_validator.ALLOW_SMTPUTF8,
            allow_empty_local=email_validator.ALLOW_EMPTY_LOCAL,
            quoted_local_part=False,
            strict=email_validator.STRICT,
        )
        checked = ValidatedEmail()
        checked.original = address
        checked.local_part = local_info["local_part"]
        checked.ascii_local_part = local_info["ascii_local_part"]
        checked.domain, checked.ascii_domain = forms
        checked.normalized = f"{checked.local_part}@{checked.domain}"
        validate_email_length(checked)
    except EmailNotValidError:
        return False
    return True


def check_email(address: str) -> None:
    """Raise ``EmailNotValidError`` (email-validator's, with its message) unless ``address`` is valid."""
    if not _plain_address_is_valid(address):
        validate_email(address, check_deliverability=False)


def cached_domains() -> int:
    """How many domain verdicts are remembered (for tests and metrics)."""
    return _domain.cache_info().currsize
