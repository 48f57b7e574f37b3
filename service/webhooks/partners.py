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

from sqlalchemy import and_, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import format_timestamp
from service.db.tables import deliveries, partners
from service.events import EVENT_MODELS
from service.exceptions import FieldError, InvalidInput
from service.ids import new_id
from service.text import CODE as TEXT_CODE
from service.text import text_fault
from service.webhooks.batching import BatchPolicy, batch_errors
from service.webhooks.breaker import BreakerState, circuit
from service.webhooks.notify import notify
from service.webhooks.signing import SECRET_PREFIX
from service.webhooks.ssrf import Resolve, UnsafeURL, check_url, system_resolve
from service.webhooks.states import DeliveryStatus, PartnerStatus

PARTNER_PREFIX = "ptn"
ACTIVE = PartnerStatus.ACTIVE
PAUSED = PartnerStatus.PAUSED
DISABLED = PartnerStatus.DISABLED
NAME_MAX_LENGTH = 200  # the partners.name column
SECRET_BYTES = 32  # docs/architecture.md "Partners": 256 bits, within the 24 to 64 Standard Webhooks allows
MEMBERS = frozenset({"name", "url", "events", "batch", "maxInFlight"})
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
    batch: BatchPolicy | None = None  # None: every delivery goes out alone

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
            "batch": self.batch.public() if self.batch is not None else None,
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
    batch: BatchPolicy | None = None


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
        batch=BatchPolicy.loads(row["batch"]),
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


def validate_new_partner(data: Mapping[str, Any]) -> NewPartner:
    """The onboarding body, strictly: ``{name, url, events?, batch?, maxInFlight?}``; raises
    ``InvalidInput`` per field (``maxInFlight``: null or absent means the default cap; ``batch``:
    null or absent means no batching, see ``service.webhooks.batching``)."""
    errors = [
        FieldError(str(key), "unknown_field", "This member is not accepted.")
        for key in data
        if key not in MEMBERS
    ]
    name = data.get("name")
    if "name" not in data:
        errors.append(FieldError("name", "missing", "This member is required."))
    elif not isinstance(name, str):
        errors.append(FieldError("name", "invalid_type", "Must be a string."))
    elif (fault := text_fault(name)) is not None:
        errors.append(FieldError("name", TEXT_CODE, fault))
    elif not name.strip():
        errors.append(FieldError("name", "invalid", "Must not be empty."))
    elif len(name.strip()) > NAME_MAX_LENGTH:
        errors.append(FieldError("name", "too_long", f"Must be at most {NAME_MAX_LENGTH} characters."))
    url = data.get("url")
    if "url" not in data:
        errors.append(FieldError("url", "missing", "This member is required."))
    elif not isinstance(url, str):
        errors.append(FieldError("url", "invalid_type", "Must be a string."))
    elif (fault := text_fault(url)) is not None:
        errors.append(FieldError("url", TEXT_CODE, fault))
    kinds: tuple[str, ...] | None = None
    if "events" in data:
        kinds, event_errors = _events_filter(data["events"])
        errors.extend(event_errors)
    batch, batch_faults = batch_errors(data.get("batch"))
    errors.extend(batch_faults)
    if batch is not None and kinds is not None:
        errors.extend(
            FieldError(f"batch.events.{index}", "not_subscribed", "Batch only kinds the partner receives.")
            for index, kind in enumerate(batch.events)
            if kind not in kinds
        )
    cap = data.get("maxInFlight")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_IN_FLIGHT_LIMIT
    ):
        message = f"Must be a whole number from 1 to {MAX_IN_FLIGHT_LIMIT}."
        errors.append(FieldError("maxInFlight", "invalid", message))
    if errors:
        raise InvalidInput(errors=errors)
    assert isinstance(name, str) and isinstance(url, str)
    return NewPartner(name=name.strip(), url=url, events=kinds, max_in_flight=cap, batch=batch)


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
        batch=new.batch,
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
            batch=new.batch.dumps() if new.batch is not None else None,
            created_at=now,
            updated_at=now,
        )
    )
    return partner


async def list_partners(conn: AsyncConnection) -> list[Partner]:
    result = await conn.execute(select(partners).order_by(partners.c.created_at, partners.c.id))
    return [_partner(row) for row in result.mappings()]


async def get_partner(conn: AsyncConnection, partner_id: str) -> Partner | None:
    result = await conn.execute(select(partners).where(partners.c.id == partner_id))
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
        update(partners).where(partners.c.id == partner_id, partners.c.status != status).values(**values)
    )
    if changed.rowcount and status == ACTIVE:
        await notify(conn)  # its waiting deliveries are claimable again
    return await get_partner(conn, partner_id)


async def set_batch(
    conn: AsyncConnection, partner_id: str, policy: BatchPolicy | None, *, now: datetime
) -> bool:
    """Change the partner's batch policy; whether the partner exists. Deliveries waiting for a batch
    of a kind no longer batched go out alone at the next claim; events published from now on
    follow the new policy."""
    result = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id)
        .values(batch=policy.dumps() if policy is not None else None, updated_at=now)
    )
    return bool(result.rowcount)


async def rotate_secret(
    conn: AsyncConnection, partner_id: str, *, now: datetime, overlap: float, secret: str | None = None
) -> tuple[Partner, str] | None:
    """A new secret; the current one becomes the previous, signing until ``now + overlap``."""
    fresh = secret or new_secret()
    # SET expressions read the row as it was, so previous_secret takes the old secret.
    result = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id)
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
    (its schedule was already spent), until the next admin retry. A failed batch is requeued as
    one delivery (the same bytes); its members wait in it again, ``batched``.
    """
    failed = and_(deliveries.c.partner_id == partner_id, deliveries.c.status == DeliveryStatus.FAILED)
    await conn.execute(
        update(deliveries)
        .where(failed, deliveries.c.batch_id.is_not(None))
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    result = await conn.execute(
        update(deliveries)
        .where(failed)
        .values(status=DeliveryStatus.PENDING, next_attempt_at=now, updated_at=now)
    )
    if result.rowcount:
        await notify(conn)
    return int(result.rowcount)


async def pause_many(conn: AsyncConnection, partner_ids: Sequence[str], *, now: datetime) -> None:
    """Pause partners that answered 410 Gone (already paused ones are left as they are)."""
    if partner_ids:
        await conn.execute(
            update(partners)
            .where(partners.c.id.in_(sorted(set(partner_ids))), partners.c.status == ACTIVE)
            .values(status=PAUSED, updated_at=now)
        )
