"""Onboarded partners: who receives signed deliveries, at which URL, for which event kinds.

Secrets are ``whsec_`` + the standard base64 of 32 bytes from ``secrets`` (the Standard Webhooks
form, so its libraries take them unchanged; partners onboarded earlier hold ``token_urlsafe(32)``
secrets, which keep working: see ``signing.standard_key``) and leave the service only in the answer
to an onboarding or a rotation; ``Partner.public()`` (what listings show) and ``repr`` never hold them.
A rotation keeps the previous secret signing for ``Settings.secret_rotation_overlap`` seconds, so a
partner can roll its verifier without dropping a delivery; a second rotation inside the overlap
retires the oldest secret at once (two secrets are live at most).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import format_timestamp
from service.db.tables import deliveries, partners
from service.events import EVENT_MODELS
from service.exceptions import FieldError, InvalidInput
from service.ids import new_id
from service.text import CODE as TEXT_CODE
from service.text import text_fault
from service.webhooks.breaker import BreakerState, circuit
from service.webhooks.notify import notify
from service.webhooks.signing import SECRET_PREFIX
from service.webhooks.ssrf import Resolve, UnsafeURL, check_url, system_resolve
from service.webhooks.states import DeliveryStatus, PartnerStatus

PARTNER_PREFIX = "ptn"
ACTIVE = PartnerStatus.ACTIVE
PAUSED = PartnerStatus.PAUSED
DISABLED = PartnerStatus.DISABLED
REMOVED = PartnerStatus.REMOVED
# What removing a partner cancels: everything not yet delivered or given up on.
UNDELIVERED = (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)
NAME_MAX_LENGTH = 200  # the partners.name column
SECRET_BYTES = 32  # docs/architecture.md "Partners": 256 bits, within the 24 to 64 Standard Webhooks allows
MEMBERS = frozenset({"name", "url", "events", "maxInFlight"})
MAX_IN_FLIGHT_LIMIT = 1000  # a partner's own cap; more than a worker would ever hold for one


def new_partner_id() -> str:
    return new_id(PARTNER_PREFIX)


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


@dataclass(frozen=True, slots=True)
class Partner:
    id: str
    name: str
    url: str
    events: tuple[str, ...] | None  # None: every kind
    status: str
    created_at: datetime
    updated_at: datetime
    secret: str = field(repr=False)
    previous_secret: str | None = field(default=None, repr=False)
    previous_secret_expires_at: datetime | None = None
    max_in_flight: int | None = None  # None: SERVICE_WEBHOOK_MAX_IN_FLIGHT
    breaker: BreakerState = field(default_factory=BreakerState)

    def wants(self, kind: str) -> bool:
        return self.events is None or kind in self.events

    def live_secrets(self, now: datetime) -> list[str]:
        """Secrets that sign a delivery at ``now``, newest first."""
        return live_secrets(self.secret, self.previous_secret, self.previous_secret_expires_at, now)

    def public(self, now: datetime) -> dict[str, Any]:
        """What admins see in listings: everything but secret material, the circuit as of ``now``."""
        expires = self.previous_secret_expires_at
        failing_since = self.breaker.failing_since
        return {
            "id": self.id,
            "name": self.name,
            "url": self.url,
            "events": list(self.events) if self.events is not None else None,
            "status": self.status,
            "maxInFlight": self.max_in_flight,
            "circuit": circuit(self.breaker, now),
            "consecutiveFailures": self.breaker.consecutive_failures,
            "failingSince": format_timestamp(failing_since) if failing_since is not None else None,
            "createdAt": format_timestamp(self.created_at),
            "updatedAt": format_timestamp(self.updated_at),
            "previousSecretExpiresAt": format_timestamp(expires) if expires is not None else None,
        }


def live_secrets(
    secret: str, previous: str | None, previous_expires_at: datetime | None, now: datetime
) -> list[str]:
    if previous and previous_expires_at is not None and previous_expires_at > now:
        return [secret, previous]
    return [secret]


@dataclass(frozen=True, slots=True)
class NewPartner:
    name: str
    url: str
    events: tuple[str, ...] | None
    max_in_flight: int | None = None


def _partner(row: RowMapping) -> Partner:
    kinds = json.loads(row["events"]) if row["events"] is not None else None
    return Partner(
        id=row["id"],
        name=row["name"],
        url=row["url"],
        events=tuple(kinds) if kinds is not None else None,
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        secret=row["secret"],
        previous_secret=row["previous_secret"],
        previous_secret_expires_at=row["previous_secret_expires_at"],
        max_in_flight=row["max_in_flight"],
        breaker=BreakerState(
            consecutive_failures=row["consecutive_failures"],
            failing_since=row["failing_since"],
            open_until=row["circuit_open_until"],
            cooldown=row["circuit_cooldown"],
        ),
    )


# --- validation -------------------------------------------------------------------------------


def _events_filter(value: object) -> tuple[tuple[str, ...] | None, list[FieldError]]:
    if not isinstance(value, list):
        return None, [FieldError("events", "invalid_type", "Must be an array of event kinds.")]
    if not value:
        return None, [FieldError("events", "invalid", "Name at least one event kind, or omit it.")]
    errors: list[FieldError] = []
    kinds: list[str] = []
    for index, kind in enumerate(value):
        if not isinstance(kind, str):
            errors.append(FieldError(f"events.{index}", "invalid_type", "Must be a string."))
        elif kind not in EVENT_MODELS:
            errors.append(
                FieldError(f"events.{index}", "unknown_event", "Name one of the event kinds in the catalog.")
            )
        elif kind not in kinds:
            kinds.append(kind)
    return tuple(kinds), errors


def _name_errors(name: object) -> list[FieldError]:
    if not isinstance(name, str):
        return [FieldError("name", "invalid_type", "Must be a string.")]
    if (fault := text_fault(name)) is not None:
        return [FieldError("name", TEXT_CODE, fault)]
    if not name.strip():
        return [FieldError("name", "invalid", "Must not be empty.")]
    if len(name.strip()) > NAME_MAX_LENGTH:
        return [FieldError("name", "too_long", f"Must be at most {NAME_MAX_LENGTH} characters.")]
    return []


def _url_errors(url: object) -> list[FieldError]:
    if not isinstance(url, str):
        return [FieldError("url", "invalid_type", "Must be a string.")]
    if (fault := text_fault(url)) is not None:
        return [FieldError("url", TEXT_CODE, fault)]
    return []


def _cap_errors(cap: object) -> list[FieldError]:
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_IN_FLIGHT_LIMIT
    ):
        return [FieldError("maxInFlight", "invalid", f"Must be a whole number from 1 to {MAX_IN_FLIGHT_LIMIT}.")]
    return []


def _unknown_members(data: Mapping[str, Any]) -> list[FieldError]:
    return [
        FieldError(str(key), "unknown_field", "This member is not accepted.") for key in data if key not in MEMBERS
    ]


def validate_new_partner(data: Mapping[str, Any]) -> NewPartner:
    """The onboarding body, strictly: ``{name, url, events?, maxInFlight?}``; raises ``InvalidInput``
    per field (``maxInFlight``: null or absent means the default cap)."""
    errors = _unknown_members(data)
    for member in ("name", "url"):
        if member not in data:
            errors.append(FieldError(member, "missing", "This member is required."))
    if "name" in data:
        errors += _name_errors(data["name"])
    if "url" in data:
        errors += _url_errors(data["url"])
    kinds: tuple[str, ...] | None = None
    if "events" in data:
        kinds, event_errors = _events_filter(data["events"])
        errors.extend(event_errors)
    cap = data.get("maxInFlight")
    errors += _cap_errors(cap)
    if errors:
        raise InvalidInput(errors=errors)
    name, url = data["name"], data["url"]
    assert isinstance(name, str) and isinstance(url, str) and (cap is None or isinstance(cap, int))
    return NewPartner(name=name.strip(), url=url, events=kinds, max_in_flight=cap)


@dataclass(frozen=True, slots=True)
class PartnerChange:
    """What an update sets: only the members it names (``events``/``maxInFlight`` null: the default)."""

    values: Mapping[str, Any]  # partners table columns -> new values
    url: str | None = None  # a new URL, to be checked as at onboarding


def validate_partner_change(data: Mapping[str, Any]) -> PartnerChange:
    """An update body, strictly: at least one of ``{name, url, events, maxInFlight}``; ``events``
    null means every kind again and ``maxInFlight`` null the default cap."""
    errors = _unknown_members(data)
    if not data:
        errors.append(FieldError("body", "missing", f"Name at least one of: {', '.join(sorted(MEMBERS))}."))
    values: dict[str, Any] = {}
    if "name" in data:
        errors += _name_errors(data["name"])
        values["name"] = data["name"].strip() if isinstance(data["name"], str) else None
    if "url" in data:
        errors += _url_errors(data["url"])
        values["url"] = data["url"]
    if "events" in data:
        kinds: tuple[str, ...] | None = None
        if data["events"] is not None:
            kinds, event_errors = _events_filter(data["events"])
            errors.extend(event_errors)
        values["events"] = json.dumps(list(kinds)) if kinds is not None else None
    if "maxInFlight" in data:
        errors += _cap_errors(data["maxInFlight"])
        values["max_in_flight"] = data["maxInFlight"]
    if errors:
        raise InvalidInput(errors=errors)
    url = values.get("url")
    return PartnerChange(values=values, url=url if isinstance(url, str) else None)


async def check_destination(url: str, *, allow_private: bool, resolve: Resolve = system_resolve) -> None:
    """Refuse a URL the service must not call (shape, scheme, internal address) as a field error."""
    try:
        await check_url(url, allow_private=allow_private, resolve=resolve)
    except UnsafeURL as error:
        raise InvalidInput(errors=[FieldError("url", error.code, str(error))]) from None


# --- storage ----------------------------------------------------------------------------------


async def create_partner(
    conn: AsyncConnection,
    new: NewPartner,
    *,
    now: datetime,
    secret: str | None = None,
    partner_id: str | None = None,
) -> Partner:
    partner = Partner(
        id=partner_id or new_partner_id(),
        name=new.name,
        url=new.url,
        events=new.events,
        status=ACTIVE,
        created_at=now,
        updated_at=now,
        secret=secret or new_secret(),
        max_in_flight=new.max_in_flight,
    )
    await conn.execute(
        partners.insert().values(
            id=partner.id,
            name=partner.name,
            url=partner.url,
            events=json.dumps(list(new.events)) if new.events is not None else None,
            status=ACTIVE,
            secret=partner.secret,
            max_in_flight=new.max_in_flight,
            created_at=now,
            updated_at=now,
        )
    )
    return partner


async def list_partners(conn: AsyncConnection) -> list[Partner]:
    result = await conn.execute(
        select(partners).where(partners.c.status != REMOVED).order_by(partners.c.created_at, partners.c.id)
    )
    return [_partner(row) for row in result.mappings()]


async def get_partner(conn: AsyncConnection, partner_id: str) -> Partner | None:
    result = await conn.execute(select(partners).where(partners.c.id == partner_id, partners.c.status != REMOVED))
    row = result.mappings().first()
    return _partner(row) if row is not None else None


async def set_status(
    conn: AsyncConnection, partner_id: str, status: PartnerStatus, *, now: datetime
) -> Partner | None:
    """Pause or resume; the write comes first so SQLite never upgrades a read lock."""
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if status == ACTIVE:  # a resume starts the partner afresh: circuit closed, no failures counted
        values.update(
            consecutive_failures=0, failing_since=None, circuit_open_until=None, circuit_cooldown=None
        )
    changed = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != status, partners.c.status != REMOVED)
        .values(**values)
    )
    if changed.rowcount and status == ACTIVE:
        await notify(conn)  # its waiting deliveries are claimable again
    return await get_partner(conn, partner_id)


async def rotate_secret(
    conn: AsyncConnection, partner_id: str, *, now: datetime, overlap: float, secret: str | None = None
) -> tuple[Partner, str] | None:
    """A new secret; the current one becomes the previous, signing until ``now + overlap``."""
    fresh = secret or new_secret()
    # SET expressions read the row as it was, so previous_secret takes the old secret.
    result = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != REMOVED)
        .values(
            previous_secret=partners.c.secret,
            secret=fresh,
            previous_secret_expires_at=now + timedelta(seconds=overlap),
            updated_at=now,
        )
    )
    if result.rowcount == 0:
        return None
    partner = await get_partner(conn, partner_id)
    assert partner is not None
    return partner, fresh


async def retry_failed(conn: AsyncConnection, partner_id: str, *, now: datetime) -> int:
    """Make the partner's failed deliveries pending again, due now; how many were requeued.

    Each requeued delivery gets one more attempt; if that one fails too it is failed again
    (its schedule was already spent), until the next admin retry.
    """
    result = await conn.execute(
        update(deliveries)
        .where(deliveries.c.partner_id == partner_id, deliveries.c.status == DeliveryStatus.FAILED)
        .values(status=DeliveryStatus.PENDING, next_attempt_at=now, updated_at=now)
    )
    if result.rowcount:
        await notify(conn)
    return int(result.rowcount)


async def update_partner(
    conn: AsyncConnection, partner_id: str, change: PartnerChange, *, now: datetime
) -> Partner | None:
    """Apply ``change`` to a partner that is not removed; None when there is no such partner.

    Deliveries not yet sent go to the new URL (claims read it); new events follow the new filter;
    deliveries already made for earlier events stay as they are.
    """
    changed = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != REMOVED)
        .values(**change.values, updated_at=now)
    )
    return await get_partner(conn, partner_id) if changed.rowcount else None


async def remove_partner(conn: AsyncConnection, partner_id: str, *, now: datetime) -> int | None:
    """Remove a partner: its undelivered deliveries become ``cancelled``; how many, or None when
    there is no such partner.

    The row stays, without its secrets, so the deliveries and attempts already logged still name
    it (retention prunes them in time); listings and lookups no longer see it. A delivery in flight
    loses its claim token here, so its worker's answer cannot settle it afterwards.
    """
    removed = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != REMOVED)
        .values(status=REMOVED, secret="", previous_secret=None, previous_secret_expires_at=None, updated_at=now)
    )
    if not removed.rowcount:
        return None
    cancelled = await conn.execute(
        update(deliveries)
        .where(deliveries.c.partner_id == partner_id, deliveries.c.status.in_(UNDELIVERED))
        .values(
            status=DeliveryStatus.CANCELLED, claim_token=None, claimed_until=None, updated_at=now
        )
    )
    return int(cancelled.rowcount)


async def pause_many(conn: AsyncConnection, partner_ids: Sequence[str], *, now: datetime) -> None:
    """Pause partners that answered 410 Gone (already paused ones are left as they are)."""
    if partner_ids:
        await conn.execute(
            update(partners)
            .where(partners.c.id.in_(sorted(set(partner_ids))), partners.c.status == ACTIVE)
            .values(status=PAUSED, updated_at=now)
        )
