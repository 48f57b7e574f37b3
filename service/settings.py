"""Settings, read once from ``SERVICE_*`` environment variables and validated before anything starts.

``Settings()`` reads the environment; tests build ``Settings(database_url=..., ...)`` directly. The
object is passed to ``create_app``; nothing in the service imports a global instance.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from limits import parse_many
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.util import asbool

from service.proxies import parse_networks

# SERVICE_WEBHOOK_RETRY_SCHEDULE's default, seconds between attempts after the first: 27.6 hours
# in all, so an endpoint down for a day still gets every event (docs/architecture.md "Retries").
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
# The shortest admin token accepted: 32 characters of even a small alphabet are far beyond
# guessing at the throttled pace of failed attempts (``service.admin.FAILED_ATTEMPTS_LIMIT``).
ADMIN_TOKEN_MIN_LENGTH = 32
# A century: any longer is "keep everything", and past 999,999,999 days no date can be counted back.
RETENTION_DAYS_MAX = 36_500
# Durations the worker adds to the clock (a lease, a retry's due time, a circuit's cool-down, a
# secret's overlap): finite and at most a year, so no sum can pass the last date Python holds and
# stop delivery with an OverflowError once it has started. Infinity and NaN are refused alike.
YEAR_SECONDS = 365 * 24 * 3600
# An attempt (and its connect) may take an hour at most; its claim lasts twice that and more.
ATTEMPT_SECONDS_MAX = 3600
# The longest overlap a rotation keeps the old secrets signing: longer than any verifier rollout
# needs (a rotation call's own overlapSeconds is held to it too).
OVERLAP_SECONDS_MAX = 30 * 86400
Delay = Annotated[float, Field(ge=0, le=YEAR_SECONDS, allow_inf_nan=False)]


# What a PostgreSQL URL's query may set: asyncpg's connection parameters that take text (any other
# name would reach asyncpg as a keyword it refuses, a traceback at start), and libpq's ``sslmode``,
# which ``db.engine.async_url`` passes on as ``ssl``.
POSTGRES_QUERY = ("ssl", "sslmode", "password", "passfile", "target_session_attrs", "krbsrvname", "gsslib")
# The values asyncpg takes for the options that take a word (any other stops the start with a
# traceback from inside the driver).
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
POSTGRES_CHOICES = {"ssl": _SSL_MODES, "sslmode": _SSL_MODES, "target_session_attrs": _SESSION_ATTRS}
# What a SQLite URL's query may set: the connection options SQLAlchemy's SQLite driver reads from it,
# each converted as the driver converts it (a value it cannot convert, ``timeout=abc``, stopped
# every connection with a traceback), and, with ``uri=true``, SQLite's own URI parameters, which
# SQLite reads from the file name. ``isolation_level`` is left out: the service begins and commits
# its transactions itself, and autocommit would undo its group commits.
_SQLITE_NUMBERS = ("timeout",)  # seconds, more than 0
_SQLITE_SWITCHES = ("uri", "check_same_thread")  # true or false, as SQLAlchemy reads them
_SQLITE_WHOLE = ("cached_statements", "detect_types")
SQLITE_QUERY = (*_SQLITE_NUMBERS, *_SQLITE_SWITCHES, *_SQLITE_WHOLE)
SQLITE_URI_QUERY = ("cache", "immutable", "mode", "nolock", "psow", "vfs")


def _switch(text: str) -> bool | None:
    """A true-or-false query value as SQLAlchemy reads it; None for anything else."""
    try:
        return bool(asbool(text))
    except ValueError:
        return None


def _positive_number(text: str) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and number > 0


def _sqlite_fault(url: URL) -> str | None:
    """What makes a SQLite URL unusable, said without repeating it; None when it is usable."""
    repeated = sorted(name for name, given in url.query.items() if not isinstance(given, str))
    if repeated:  # the driver would be handed a list, and fail on it
        return f"query parameter {', '.join(repeated)} is given more than once"
    query = {name: str(given) for name, given in url.query.items()}
    uri = _switch(query.get("uri", "false"))
    database = url.database or ""
    in_memory = database in ("", ":memory:") or (
        bool(uri) and (database.startswith("file::memory:") or query.get("mode") == "memory")
    )
    if in_memory:
        # Every connection of the pool would open a database of its own, empty: the schema the
        # start migrated would be gone by the first request.
        return (
            "a SQLite database in memory is not kept between connections; name a file, "
            "sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    accepted = SQLITE_QUERY + (SQLITE_URI_QUERY if uri else ())
    unknown = sorted(set(query) - set(accepted))
    if unknown:
        return (
            f"unknown query parameter {', '.join(unknown)} (accepted: {', '.join(SQLITE_QUERY)}; "
            f"with uri=true also {', '.join(SQLITE_URI_QUERY)})"
        )
    for name, text in query.items():
        if name in _SQLITE_NUMBERS and not _positive_number(text):
            return f"{name} must be a number of seconds greater than 0"
        if name in _SQLITE_SWITCHES and _switch(text) is None:
            return f"{name} must be true or false"
        if name in _SQLITE_WHOLE and not (text.isascii() and text.isdigit()):
            return f"{name} must be a whole number"
    return None


# The public base URL: scheme, host (a name, an IPv4 or a bracketed IPv6 address), port and path,
# in the characters a path takes without quoting anything around it.
_BASE_URL = re.compile(r"https?://[A-Za-z0-9\-._~:/\[\]%@+,;=]+")


def _has_host(url: str) -> bool:
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed port only shows when it is read
    except ValueError:
        return False
    return bool(parts.hostname)


def _has_user_info(url: str) -> bool:
    """Whether ``url`` names a user (and perhaps a password) before its host."""
    try:
        return urlsplit(url).username is not None
    except ValueError:
        return "@" in url.partition("://")[2].partition("/")[0]


# An origin's host as browsers write it in Origin: a name in ASCII (a name in Unicode goes in its
# xn-- form), or an IPv4 address; an IPv6 address is taken apart.
_ORIGIN_HOST = re.compile(r"[a-z0-9\-._~]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(entry: str) -> str:
    """``entry`` as browsers write an origin in the Origin header: scheme and host in lower case, no
    default port, no trailing slash. ValueError, naming it, when it is not an origin."""
    reason = (
        f"not an origin: {entry!r} (scheme://host[:port], http or https, with no path, query or "
        "fragment; * is not accepted: list each origin, a name in Unicode in its xn-- form)"
    )
    try:
        parts = urlsplit(entry)
        port = parts.port  # a malformed port only shows when it is read
    except ValueError:
        raise ValueError(reason) from None
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if (
        scheme not in _DEFAULT_PORTS
        or parts.path not in ("", "/")
        or "?" in entry
        or "#" in entry
        or "@" in parts.netloc
    ):
        raise ValueError(reason)
    if ":" in host:  # an IPv6 address, written as browsers write it
        try:
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise ValueError(reason) from None
    elif not _ORIGIN_HOST.fullmatch(host):
        raise ValueError(reason)
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


class Settings(BaseSettings):
    # hide_input_in_errors: a refused value (a short admin token, a URL with a password) must not
    # be printed back in the error that stops the start.
    model_config = SettingsConfigDict(
        env_prefix="SERVICE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    # Each description is what `python -m service COMMAND --help` says of the variable.
    base_url: str = Field(
        default="http://127.0.0.1:8000",
        description="The public base URL; every absolute URL the service writes starts with it.",
    )
    database_url: str = Field(
        default="sqlite:///var/service.db",
        description="sqlite:///PATH or postgresql://USER@HOST:PORT/DB (the async driver is chosen).",
    )
    admin_token: str | None = Field(
        default=None,
        repr=False,
        description="Bearer token for /admin/*; unset or empty, the admin routes answer 404.",
    )
    waitlist_rate_limit: str = Field(
        default="10/minute",
        description="Registrations per client, in limits notation (5/minute, 10/minute;100/day).",
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description="Where rate-limit counters live: memory:// (per process), or Redis: redis://HOST:PORT, "
        "rediss://HOST:PORT (TLS) or redis+unix:///PATH.",
    )
    # Tests give every run its own Redis key prefix so runs never see each other's counters.
    rate_limit_key_prefix: str = Field(
        default="service-limits", description="Prefix of the rate-limit keys in Redis."
    )
    webhook_retry_schedule: Annotated[tuple[Delay, ...], NoDecode] = Field(
        default=DEFAULT_RETRY_SCHEDULE,
        description="Seconds between delivery attempts after the first, comma-separated; ±20% jitter.",
    )
    webhook_timeout: float = Field(
        default=15.0,
        gt=0,
        le=ATTEMPT_SECONDS_MAX,
        allow_inf_nan=False,
        description="Seconds a delivery attempt may take.",
    )
    webhook_connect_timeout: float = Field(
        default=5.0,
        gt=0,
        le=ATTEMPT_SECONDS_MAX,
        allow_inf_nan=False,
        description="Seconds to connect to a partner, inside SERVICE_WEBHOOK_TIMEOUT.",
    )
    webhook_max_in_flight: int = Field(
        default=8,
        ge=1,
        description="Attempts one partner may have in flight at once, across all workers (a partner's "
        "maxInFlight overrides it).",
    )
    webhook_breaker_failures: int = Field(
        default=5, ge=1, description="Failed attempts in a row that open a partner's circuit."
    )
    webhook_breaker_cooldown: float = Field(
        default=30.0,
        gt=0,
        le=YEAR_SECONDS,
        allow_inf_nan=False,
        description="Seconds an open circuit waits before a probe; doubles per failed probe (at most 3600).",
    )
    webhook_disable_after: float = Field(
        default=432000.0,
        gt=0,
        le=YEAR_SECONDS,
        allow_inf_nan=False,
        description="Seconds of unbroken failure after which a partner is disabled (until resumed).",
    )
    webhook_allow_private_urls: bool = Field(
        default=False,
        description="1 lets partner URLs resolve to loopback or private addresses (development only).",
    )
    secret_rotation_overlap: int = Field(
        default=86400,
        ge=0,
        le=OVERLAP_SECONDS_MAX,
        description="Seconds the secrets live before a rotation keep signing after it (0: none).",
    )
    secrets_key: str | None = Field(
        default=None,
        repr=False,
        description="Fernet keys that encrypt partner secrets at rest, comma-separated, newest first "
        "(the first encrypts, all decrypt); unset on SQLite, a key file beside the database; unset "
        "on PostgreSQL, the service does not start.",
    )
    rate_limit_ipv6_prefix: int = Field(
        default=64,
        ge=1,
        le=128,
        description="IPv6 clients are counted per network of this prefix length (one /64, one client).",
    )
    rate_limit_memory_clients: int = Field(
        default=100_000,
        ge=1,
        description="Clients the memory:// rate-limit store counts apart; when full, new clients share "
        "one counter until old ones expire.",
    )
    waitlist_global_rate_limit: str | None = Field(
        default=None,
        description="Registrations from all clients together, in limits notation; unset, no such limit.",
    )
    retention_days: int = Field(
        default=30,
        ge=1,
        le=RETENTION_DAYS_MAX,
        description="Days settled deliveries, their attempts and fully settled events are kept "
        "before pruning (registrations are never pruned).",
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated origins whose browser scripts may POST /api/waitlist.",
    )
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Addresses or networks (comma-separated) whose forwarded headers are believed; "
        "required when SANIC_PROXIES_COUNT or SANIC_REAL_IP_HEADER is set.",
    )
    max_connections: int = Field(
        default=2000,
        ge=1,
        description="Open connections per server process (never above the file-descriptor limit "
        "less a reserve); beyond it the longest-idle connection waiting between requests is closed, "
        "or the new one if every connection is being answered.",
    )
    content_file: Path | None = Field(
        default=None,  # None: the packaged default
        description="The discovery wording, a TOML file; unset, the packaged one.",
    )
    waitlist_redirect_url: str | None = Field(
        default=None,
        description="Where a form post from a browser that prefers HTML is sent (303) after registering; "
        "on a refusal, the same URL with error and field in the query. Unset: JSON answers only.",
    )

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("SERVICE_BASE_URL must start with http:// or https://")
        if _has_user_info(value):
            raise ValueError(
                "SERVICE_BASE_URL must not carry a user name or password: the documents publish it"
            )
        if not _BASE_URL.fullmatch(value) or not _has_host(value):
            # Every document puts paths after it, in HTML attributes, Markdown links and XML: a
            # query or a fragment would swallow the path, a quote or a bracket would end the link.
            raise ValueError(
                "SERVICE_BASE_URL must be http(s)://host[:port][/path]: a port up to 65535, no query, "
                "fragment, space, quote, parenthesis or angle bracket"
            )
        return value

    @field_validator("waitlist_redirect_url")
    @classmethod
    def _redirect_url(cls, value: str | None) -> str | None:
        if not value or not value.strip():
            return None  # empty means unset
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c in value for c in "\r\n\t "):
            raise ValueError("SERVICE_WAITLIST_REDIRECT_URL must be an absolute http:// or https:// URL")
        if _has_user_info(value):
            raise ValueError(
                "SERVICE_WAITLIST_REDIRECT_URL must not carry a user name or password: "
                "browsers are sent to it"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        if not value.startswith(("sqlite:", "postgresql:", "postgres:", "postgresql+")):
            raise ValueError("SERVICE_DATABASE_URL must be sqlite:///PATH or postgresql://...")
        # The reasons never repeat the URL: it may carry the database password.
        try:
            url = make_url(value)
            port = url.port
        except (ArgumentError, ValueError):
            raise ValueError(
                "SERVICE_DATABASE_URL is not a valid URL (postgresql://USER[:PASSWORD]@HOST[:PORT]/DB; "
                "characters such as @ : / in the password are written %40 %3A %2F)"
            ) from None
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"SERVICE_DATABASE_URL's port {port} is not between 1 and 65535")
        if url.host and "@" in url.host:  # the rest of a password with an @ left unescaped
            raise ValueError("SERVICE_DATABASE_URL: an @ in the user name or password is written %40")
        # postgres:// is PostgreSQL too (the engine reads it so); SQLAlchemy names its backend
        # "postgres", and a check keyed on "postgresql" alone let such a URL through unchecked.
        backend = "postgresql" if url.get_backend_name() == "postgres" else url.get_backend_name()
        unknown = sorted(set(url.query) - set(POSTGRES_QUERY))
        if backend == "postgresql" and unknown:
            raise ValueError(
                f"SERVICE_DATABASE_URL: unknown query parameter {', '.join(unknown)} "
                f"(accepted: {', '.join(POSTGRES_QUERY)})"
            )
        for name, choices in POSTGRES_CHOICES.items():
            given = url.query.get(name) if backend == "postgresql" else None
            if given is not None and given not in choices:
                raise ValueError(f"SERVICE_DATABASE_URL: {name} must be one of {', '.join(choices)}")
        if backend == "sqlite" and (url.host or url.port or url.username or url.password):
            raise ValueError(
                "SERVICE_DATABASE_URL: a SQLite URL names a file, sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db"
            )
        if backend == "postgresql" and not url.database:
            raise ValueError("SERVICE_DATABASE_URL names no database (postgresql://USER@HOST:PORT/DB)")
        if backend == "sqlite" and (fault := _sqlite_fault(url)) is not None:
            raise ValueError(f"SERVICE_DATABASE_URL: {fault}")
        return value

    @field_validator("admin_token")
    @classmethod
    def _admin_token(cls, value: str | None) -> str | None:
        if not value:
            return None  # empty means unset: admin routes stay hidden
        if len(value) < ADMIN_TOKEN_MIN_LENGTH:
            raise ValueError(
                f"SERVICE_ADMIN_TOKEN must be at least {ADMIN_TOKEN_MIN_LENGTH} characters "
                f"(it has {len(value)}); make one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        if not all("!" <= char <= "~" for char in value):
            # What a client sends in an Authorization header: anything else could never match.
            raise ValueError("SERVICE_ADMIN_TOKEN must be printable ASCII without spaces")
        return value

    @field_validator("waitlist_rate_limit")
    @classmethod
    def _rate_limit(cls, value: str) -> str:
        try:
            parse_many(value)
        except ValueError as error:
            raise ValueError(f"SERVICE_WAITLIST_RATE_LIMIT is not limits notation: {error}") from None
        return value

    @field_validator("waitlist_global_rate_limit")
    @classmethod
    def _global_rate_limit(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            parse_many(value)
        except ValueError as error:
            raise ValueError(f"SERVICE_WAITLIST_GLOBAL_RATE_LIMIT is not limits notation: {error}") from None
        return value

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None  # empty means unset

    @field_validator("rate_limit_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://", "redis+unix://")):
            raise ValueError("SERVICE_RATE_LIMIT_STORAGE must be memory:// or redis://HOST:PORT")
        if value.startswith(("redis://", "rediss://")):
            # Checked here, so the server never starts with it: the storage library's own error
            # quotes the whole URL, password and all. These messages quote none of it.
            try:
                parts = urlsplit(value)
                parts.port  # noqa: B018 - a port that is no number in range only shows when read
            except ValueError:
                raise ValueError("SERVICE_RATE_LIMIT_STORAGE: its host or port cannot be read") from None
            if not parts.hostname:
                raise ValueError("SERVICE_RATE_LIMIT_STORAGE must name a host: redis://HOST:PORT")
            database = parts.path.strip("/")
            if database and not (database.isascii() and database.isdigit()):
                raise ValueError("SERVICE_RATE_LIMIT_STORAGE: the database must be a number, as in redis://HOST:PORT/0")
        return value

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _schedule(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(float(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return tuple(str(network) for network in parse_networks(value))
        except ValueError as error:
            raise ValueError(f"SERVICE_TRUSTED_PROXIES: {error}") from None

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins_as_sent(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Compared as they stand with the Origin header, which browsers write one way only: an
        # entry written another way (a trailing slash, a capital, :443) would never match.
        try:
            return tuple(dict.fromkeys(_origin(entry) for entry in value))
        except ValueError as error:
            raise ValueError(f"SERVICE_CORS_ORIGINS: {error}") from None
