"""Keeping addresses out of analysis output: masks for display, a hash for identity."""

from __future__ import annotations

import hashlib
import re

MASK = "***"
# 16 hex digits (64 bits): collisions negligible for any waitlist, still short in a table.
EMAIL_HASH_LENGTH = 16
# Deliberately loose: free text loses anything address-like; a false positive costs nothing. The
# intake takes addresses in any script (``josé@bücher.example``), so the parts are read as word
# characters of any script (``\w``: letters, digits, ``_``), plus the punctuation local parts use.
# A match starts only where a run of local-part characters starts: tried from every position
# inside a long run with no address after it, the search took time in the square of the text's
# length.
_LOCAL = r"[\w.%+'-]"
_EMAIL_IN_TEXT = re.compile(rf"(?<!{_LOCAL}){_LOCAL}+@[\w-]+(?:\.[\w-]+)+")


def mask_email(email: str) -> str:
    """``"alice@example.com"`` -> ``"a***@example.com"``; text with no ``@`` becomes ``"***"``."""
    local, at, domain = email.strip().rpartition("@")
    if not at:
        return MASK  # not an address we can split, so show none of it
    return f"{local[:1]}{MASK}@{domain}"


def redact_emails(text: str) -> str:
    """Mask every address-like run inside free text (messages, partner responses)."""
    return _EMAIL_IN_TEXT.sub(lambda match: mask_email(match.group(0)), text)


def email_hash(email: str) -> str:
    """A short, stable identity for an address: sha256 of its trimmed, lower-cased form.

    It lets analyses count people without showing addresses. It is not anonymous: anyone holding
    a candidate address can hash it and compare, so treat the hash as personal data too.
    """
    digest = hashlib.sha256(email.strip().lower().encode("utf-8")).hexdigest()
    return digest[:EMAIL_HASH_LENGTH]
