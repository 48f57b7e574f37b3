"""Masks and identity hashes keep addresses out of analysis output."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from email_validator import EmailNotValidError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from analytics import email_hash, mask_email, redact_emails
from analytics.privacy import MASK
from service.emails import check_email

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
        # Vowel signs and viramas (Unicode category M, which \w does not match), in both parts.
        ("लिखें परीक्षा@उदाहरण.भारत पर", "लिखें प***@उदाहरण.भारत पर"),
        ("contact สมชาย@ตัวอย่าง.ไทย", "contact ส***@ตัวอย่าง.ไทย"),
        ("reach அன்பு@example.com", "reach அ***@example.com"),
        ("ஆசிரியர்@இலங்கை.com", "ஆ***@இலங்கை.com"),
        # Decomposed (NFD) accents, as macOS keyboards may send them.
        ("mail jose\u0301@example.com", "mail j***@example.com"),
        ("e\u0301lodie@bu\u0308cher.example", "e***@bu\u0308cher.example"),
        # A dot IDNA reads as one, symbols, and punctuation from other scripts.
        ("ann@例え。jp", "a***@例え。jp"),
        ("a😀b@example.com", "a***@example.com"),
        ("«ann@example.com»", "«***@example.com»"),
        # RFC 5322's punctuation inside a local part, each character.
        *((f"cc first{char}last@example.com", "cc f***@example.com") for char in "!#$%&'*+-/=?^_`{|}~."),
    ],
)
def test_an_address_in_any_script_is_masked(text: str, redacted: str) -> None:
    """The intake takes addresses whose local part or domain is not ASCII, or holds combining marks
    or punctuation; free text loses them as it loses ASCII ones, the whole local part but its first
    character. ``\\w`` alone left ``first=l***@`` and every Devanagari, Thai or Tamil address whole."""
    assert redact_emails(text) == redacted


@pytest.mark.parametrize(
    "text",
    ["ann@example.com.bob@example.org", "ann@example.com、bob@example.org", "ann@例え.jp/bob@example.org"],
)
def test_a_domain_run_into_the_next_address_takes_no_name_along(text: str) -> None:
    """Text run on from one address's domain into the next address may be that address's local part
    (a dot, ``/`` and ``、`` can each stand in one), so it is masked as one and no name shows: the
    domain after ``ann@`` was read as far as it could go, ``.bob`` with it, leaving ``bob@`` whole."""
    assert redact_emails(text).endswith("***@example.org") and "bob" not in redact_emails(text)


# Characters an unquoted local part may hold: RFC 5322's ASCII, and beyond ASCII any letter, mark,
# number, punctuation or symbol (RFC 6531; email-validator refuses spaces, controls and formats).
LOCAL_CHARACTERS = st.one_of(
    st.sampled_from("abcXYZ019!#$%&'*+-/=?^_`{|}~"),
    st.characters(categories=("L", "M", "N", "P", "S"), min_codepoint=0x80),
)
ATOMS = st.text(LOCAL_CHARACTERS, min_size=1, max_size=8)
LOCAL_PARTS = st.lists(ATOMS, min_size=1, max_size=4).map(".".join)
DOMAINS = st.one_of(
    st.sampled_from(
        [
            "example.com",
            "bücher.example",
            "bu\u0308cher.example",
            "例え.jp",
            "例え。jp",
            "例子.广告",
            "उदाहरण.भारत",
            "ตัวอย่าง.ไทย",
            "இலங்கை.com",
            "ⓔⓧ.com",
            "\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0ecom",  # full-width letters and dot
            "xn--bcher-kva.example",
        ]
    ),
    st.lists(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True), min_size=1, max_size=3).map(
        lambda labels: ".".join([*labels, "com"])
    ),
)
TEXT = st.text(st.characters(exclude_characters="@"), max_size=12)


@settings(max_examples=500, deadline=None)
@given(LOCAL_PARTS, DOMAINS, TEXT, TEXT)
def test_no_address_the_intake_accepts_shows_more_than_its_first_character(
    local: str, domain: str, before: str, after: str
) -> None:
    """Any address the intake accepts, with any text around it, comes out with no more of its local
    part than its first character in front of the mask, and its domain as written; the text after
    it is untouched. The match may start earlier, inside text run into the address: then less
    shows. Text with no ``@`` is never changed."""
    address = f"{local}@{domain}"
    try:
        check_email(address)
    except EmailNotValidError:
        assume(False)
    redacted = redact_emails(before + address + after)
    tail = f"{MASK}@{domain}{after}"
    assert redacted.endswith(tail)
    shown = redacted[: -len(tail)]
    assert (before + local).startswith(shown) and len(shown) <= len(before) + 1
    assert redact_emails(before + after) == before + after


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
