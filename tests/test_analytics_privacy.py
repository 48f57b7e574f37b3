"""Masks and identity hashes keep addresses out of analysis output."""

from __future__ import annotations

import hashlib

import pytest

from analytics import email_hash, mask_email, redact_emails


@pytest.mark.parametrize(
    ("email", "masked"),
    [
        ("alice@example.com", "a***@example.com"),
        ("  Bob.Smith+tag@Mail.Example.org ", "B***@Mail.Example.org"),
        ("x@y.io", "x***@y.io"),
        ("@example.com", "***@example.com"),
        ("not-an-address", "***"),
        ("", "***"),
    ],
)
def test_mask_email(email: str, masked: str) -> None:
    """Only the first character of the local part and the domain survive."""
    assert mask_email(email) == masked


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("write to ann@example.com or bo@ex.co.uk.", "write to a***@example.com or b***@ex.co.uk."),
        ('{"email": "Zed@Example.com"}', '{"email": "Z***@Example.com"}'),
        ("no address here, just @mentions", "no address here, just @mentions"),
    ],
)
def test_redact_emails(text: str, redacted: str) -> None:
    """Every address inside free text is masked and the rest is untouched."""
    assert redact_emails(text) == redacted


def test_email_hash_is_sha256_of_the_lowercased_address() -> None:
    """The hash ignores case and surrounding space, and is sha256 cut to 16 hex digits."""
    expected = hashlib.sha256(b"ann@example.com").hexdigest()[:16]
    assert email_hash(" Ann@Example.COM ") == expected
    assert email_hash("ann@example.com") == expected
