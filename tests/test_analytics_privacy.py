"""Masks and identity hashes keep addresses out of analysis output."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from analytics import email_hash, mask_email, redact_emails

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("ann@example.com,bob@example.org", "a***@example.com,b***@example.org"),
        ("mail:ann.lee+x@example.com!", "mail:a***@example.com!"),
        ("a.b.c@d.e.f", "a***@d.e.f"),
        ("x@y", "x@y"),
        ("ann_lee@example.com", "a***@example.com"),
        ("o'brien@example.com", "o***@example.com"),
    ],
)
def test_an_address_is_masked_from_the_start_of_its_run(text: str, redacted: str) -> None:
    """A match starts where a run of local-part characters starts, so the whole local part is
    masked and what follows a separator is masked as an address of its own."""
    assert redact_emails(text) == redacted


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("write josé@bücher.example", "write j***@bücher.example"),
        ("jose@bücher.example", "j***@bücher.example"),
        ("ann@例え.jp and 用户@例子.广告", "a***@例え.jp and 用***@例子.广告"),
        ("Ünal.Öz@Example.de", "Ü***@Example.de"),
    ],
)
def test_an_address_in_any_script_is_masked(text: str, redacted: str) -> None:
    """The intake takes addresses whose local part or domain is not ASCII; free text loses them as
    it loses ASCII ones."""
    assert redact_emails(text) == redacted


def test_hostile_text_is_redacted_in_one_pass():
    """Redacting a million-character run with no address in it, or runs cut by bare `@`s, reads
    the text once (milliseconds): tried from every position inside the run, the search took time
    in the square of its length (about 20 minutes for this text). Run in a child process so a regression fails at the
    bound instead of holding the suite."""
    script = (
        "from analytics import redact_emails\n"
        "for text in ('a' * 1_000_000, ('a' * 50 + '@') * 20_000 + 'x', 'a.' * 500_000 + '@'):\n"
        "    assert redact_emails(text) == text\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
