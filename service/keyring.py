"""Partner secrets at rest: sealed with Fernet under ``SERVICE_SECRETS_KEY``, opened only to sign.

``SERVICE_SECRETS_KEY`` lists Fernet keys, comma-separated, newest first; ``cryptography``'s
``MultiFernet`` seals with the first and opens with any, so keys rotate by listing a new one in
front, running ``python -m service secrets re-encrypt``, then dropping the old one.

Unset, an embedded SQLite database gets a key file beside it (``<database>.key``, mode 0600,
made with ``O_EXCL`` so two processes starting together agree on one key, reused afterwards); a
PostgreSQL database has no such place every server can share, so the service refuses to start. A
key file that cannot be read or holds no Fernet key stops the start as a malformed
``SERVICE_SECRETS_KEY`` does (``KeyringError``), naming the file, never its content.

A stored secret is ``fernet:`` followed by the Fernet token. A value without the prefix is a
plaintext secret written before secrets were sealed (migration 0005 moves them as they were):
``service.webhooks.wiring.seal`` seals those at every start and ``migrate``, and ``open``
still reads one meanwhile, so signing never stops during the upgrade.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from service.db.engine import is_sqlite, sqlite_path
from service.settings import Settings

SEALED = "fernet:"  # the prefix of a sealed secret; anything else is plaintext from before
KEY_FILE_SUFFIX = ".key"
PRIVATE_FILE = 0o600


class KeyringError(ValueError):
    """The key material is missing or unusable: the service does not start."""


class UnreadableSecret(RuntimeError):
    """A stored secret none of the configured keys opens (the key that sealed it was dropped)."""


@dataclass(frozen=True, slots=True)
class Keyring:
    """Seals and opens partner secrets; ``repr`` never shows key material."""

    fernet: MultiFernet
    keys: int  # how many keys are configured (the first seals)

    def __repr__(self) -> str:
        return f"Keyring(keys={self.keys})"

    def seal(self, secret: str) -> str:
        return SEALED + self.fernet.encrypt(secret.encode()).decode("ascii")

    def open(self, stored: str) -> str:
        if not stored.startswith(SEALED):
            return stored  # plaintext from before sealing; sealed at the next start
        try:
            return self.fernet.decrypt(stored[len(SEALED) :].encode("ascii")).decode()
        except InvalidToken:
            raise UnreadableSecret(
                "a partner secret was sealed with a key SERVICE_SECRETS_KEY no longer lists"
            ) from None

    def opens(self, stored: str) -> bool:
        """Whether one of the keys opens ``stored`` (plaintext from before sealing always does)."""
        try:
            self.open(stored)
        except UnreadableSecret:
            return False
        return True

    def reseal(self, stored: str) -> str:
        """The secret sealed under the newest key (plaintext is sealed, sealed ones re-encrypted)."""
        if not stored.startswith(SEALED):
            return self.seal(stored)
        try:
            token = self.fernet.rotate(stored[len(SEALED) :].encode("ascii"))
        except InvalidToken:
            raise UnreadableSecret(
                "a partner secret was sealed with a key SERVICE_SECRETS_KEY no longer lists"
            ) from None
        return SEALED + token.decode("ascii")


# What a key file that holds no key is told (its path goes first): the secrets sealed under the key
# it held are lost without it, so a new key is no way back, unless none was sealed yet.
NOT_A_KEY = (
    "does not hold a Fernet key (32 url-safe base64-encoded bytes): restore it from a backup, or "
    "set SERVICE_SECRETS_KEY to the key that sealed the partner secrets (with none stored yet, "
    "delete it and a new one is made)"
)


def parse_keys(text: str, *, key_file: Path | None = None) -> Keyring:
    """``SERVICE_SECRETS_KEY``'s keys, newest first, or those of the embedded database's
    ``key_file``; raises ``KeyringError`` on a malformed one, naming where it was read (never
    its value)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise _malformed(key_file, "SERVICE_SECRETS_KEY lists no key")
    fernets = []
    for index, part in enumerate(parts, 1):
        try:
            fernets.append(Fernet(part.encode("ascii")))
        except (ValueError, UnicodeEncodeError):
            raise _malformed(
                key_file,
                f"SERVICE_SECRETS_KEY key {index} is not a Fernet key (32 url-safe base64-encoded "
                "bytes); make one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'",
            ) from None
    return Keyring(MultiFernet(fernets), len(fernets))


def _malformed(key_file: Path | None, setting_fault: str) -> KeyringError:
    """The error for keys that do not parse: ``setting_fault`` when they came from the setting."""
    return KeyringError(setting_fault if key_file is None else f"the key file {key_file} {NOT_A_KEY}")


def key_file(database_url: str) -> Path | None:
    """Where the embedded database's key lives, or None where it has no file (in-memory SQLite)."""
    path = sqlite_path(database_url)
    return path.with_name(path.name + KEY_FILE_SUFFIX) if path is not None else None


def _read_or_make(path: Path) -> str:
    """The key in ``path``, made first if there is none.

    A new key is written whole to a file of this caller's own (``mkstemp``: ``O_EXCL``, mode
    0600), then linked to ``path``, which fails if ``path`` exists: of two processes starting
    together one key wins, and no process ever reads a key file half written.
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            descriptor, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".new", dir=path.parent)
            draft = Path(name)
            try:
                try:
                    os.write(descriptor, Fernet.generate_key() + b"\n")
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
                with contextlib.suppress(FileExistsError):  # another process's key won
                    os.link(draft, path)
            finally:
                draft.unlink(missing_ok=True)
        text = path.read_text(encoding="ascii").strip()
    except UnicodeDecodeError:
        # The error's own text quotes a byte of the file: never repeated.
        raise KeyringError(f"the key file {path} {NOT_A_KEY}") from None
    except OSError as error:
        # A directory, no permission to read, a full disk: the file's fault, never the database's
        # (service.db.faults would take a bare OSError for a moment's storage fault).
        raise KeyringError(f"the key file {path} cannot be read or made: {error.strerror or error}") from None
    if not text:
        raise KeyringError(f"the key file {path} is empty")
    return text


# In-memory SQLite databases live as long as their process: so does their key.
_EPHEMERAL: dict[str, Keyring] = {}


def load_keyring(settings: Settings) -> Keyring:
    """The keyring for these settings; raises ``KeyringError`` with the reason when there is none."""
    if settings.secrets_key:
        return parse_keys(settings.secrets_key)
    if not is_sqlite(settings.database_url):
        raise KeyringError(
            "SERVICE_SECRETS_KEY is not set: partner secrets on a shared database are encrypted "
            "with a key every server and worker is given; make one with: python -c 'from "
            "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
        )
    path = key_file(settings.database_url)
    if path is None:
        return _EPHEMERAL.setdefault(settings.database_url, parse_keys(Fernet.generate_key().decode()))
    keyring = parse_keys(_read_or_make(path), key_file=path)
    with contextlib.suppress(OSError):  # a file made by an earlier release, or copied in
        if path.stat().st_mode & 0o077:
            path.chmod(PRIVATE_FILE)
    return keyring
