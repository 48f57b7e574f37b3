"""Keeping addresses out of analysis output: masks for display, a hash for identity."""

from __future__ import annotations

import hashlib
import re

MASK = "***"
# 16 hex digits (64 bits): collisions negligible for any waitlist, still short in a table.
EMAIL_HASH_LENGTH = 16
# Deliberately loose: free text loses anything address-like; a false positive costs nothing. A local
# part is any run of characters but spaces, controls and the ASCII no unquoted address holds
# (``"(),:;<>@[\]``), so it takes in all the intake (email-validator) accepts: every script's
# letters with their combining marks (vowel signs, viramas, a decomposed accent: ``\w`` matches no
# mark), symbols, and RFC 5322's punctuation (``first=last``, ``a!b#c``). It is an address when an
# ``@``, a domain label, a dot (or one IDNA reads as a dot: ``例え。jp``) and more label follow, so
# ``x@y`` and ``@mentions`` stay. Only the local part is matched: a domain run into the next
# address (``a@b.com、c@d.org``) is read again as a local part, not swallowed with that address.
# A match starts only where a run of local-part characters starts: tried from every position
# inside a long run with no address after it, the search took time in the square of the text's
# length.
_LOCAL = r"[^\s\x00-\x1f\x7f\"(),:;<>@\[\\\]]"
_DOTS = ".\u3002\uff0e\uff61"  # IDNA (UTS 46) maps the last three to "."
# A domain label's characters: ASCII letters, digits, "-" and "_", and anything else but a space or a dot.
_LABEL = rf"[^\s\x00-\x2c\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f{_DOTS}]"
_EMAIL_IN_TEXT = re.compile(rf"(?<!{_LOCAL}){_LOCAL}++(?=@{_LABEL}+[{_DOTS}]{_LABEL})")


def mask_email(email: str) -> str:
    """``"alice@example.com"`` -> ``"a***@example.com"``; text with no ``@`` becomes ``"***"``."""
    local, at, domain = email.strip().rpartition("@")
    if not at:
        return MASK  # not an address we can split, so show none of it
    return f"{local[:1]}{MASK}@{domain}"


def redact_emails(text: str) -> str:
    """Mask every address-like run inside free text (messages, partner responses): its local part
    keeps its first character, as ``mask_email`` leaves it."""
    return _EMAIL_IN_TEXT.sub(lambda match: f"{match.group(0)[:1]}{MASK}", text)


def email_hash(email: str) -> str:
    """A short, stable identity for an address: sha256 of its trimmed, lower-cased form.

    It lets analyses count people without showing addresses. It is not anonymous: anyone holding
    a candidate address can hash it and compare, so treat the hash as personal data too.
    """
    digest = hashlib.sha256(email.strip().lower().encode("utf-8")).hexdigest()
    return digest[:EMAIL_HASH_LENGTH]
