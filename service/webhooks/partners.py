"""Onboarded partners: who receives signed deliveries, at which URL, for which event kinds.

Secrets are ``whsec_`` + the standard base64 of 32 bytes from ``secrets`` (the Standard Webhooks
form, so its libraries take them unchanged; partners onboarded earlier hold ``token_urlsafe(32)``
secrets, which keep working: see ``signing.standard_key``) and leave the service only in the answer
to an onboarding or a rotation; ``Partner`` (what listings show) never holds them. They are stored
sealed (``service.keyring``) in ``partner_secrets`` and opened only to sign: by the claim
(``claim.claim_due``) and by a test delivery (``live_secrets``).

A rotation issues a new current secret; the secrets live until then keep signing for the overlap
(``Settings.secret_rotation_overlap`` or the call's own), so a partner can roll its verifier without
dropping a delivery. An old secret's expiry is only ever brought closer: a rotation with a shorter
overlap than what an earlier one left (``0``: none, after a leak) ends it sooner, and one with a
longer overlap leaves it as it was. So however many rotations come in between (a retried call
whose first answer was lost), no secret stops signing before its overlap ends, unless a rotation
asked for that. A secret whose expiry has passed is deleted: at the next rotation, or when a claim
or a test delivery finds it.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import and_, bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import format_timestamp
from service.db.tables import deliveries, partner_secrets, partners, secret_digests
from service.events import EVENT_MODELS
from service.exceptions import FieldError, InvalidInput
from service.ids import new_id
from service.keyring import SEALED, Keyring, UnreadableSecret
from service.states import CircuitChange, DeliveryStatus, PartnerStatus
from service.text import CODE as TEXT_CODE
from service.text import line_fault, text_fault
from service.webhooks.batching import BatchPolicy, batch_errors
from service.webhooks.breaker import STOPPING, BreakerState, circuit, resumed
from service.webhooks.notify import notify
from service.webhooks.signing import SECRET_PREFIX, secret_digest
from service.webhooks.ssrf import Resolve, UnsafeURL, check_url, system_resolve

PARTNER_PREFIX = "ptn"
# What removing a partner cancels: everything not yet delivered or given up on.
UNDELIVERED = (
    DeliveryStatus.PENDING,
    DeliveryStatus.DELIVERING,
    DeliveryStatus.BATCHING,
    DeliveryStatus.BATCHED,
)
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
    max_in_flight: int | None = None  # None: SERVICE_WEBHOOK_MAX_IN_FLIGHT
    breaker: BreakerState = field(default_factory=BreakerState)
    old_secrets_expire: tuple[datetime, ...] = ()  # each old secret's expiry; never the secrets
    current_secrets: int = 1  # secrets without an expiry: one, or none once discard-unreadable ran
    batch: BatchPolicy | None = None  # None: every delivery goes out alone

    def wants(self, kind: str) -> bool:
        return self.events is None or kind in self.events

    def old_secrets_end(self, now: datetime) -> datetime | None:
        """When the last old secret still signing at ``now`` stops; None when only one signs."""
        live = [expires for expires in self.old_secrets_expire if expires > now]
        return max(live) if live else None

    def public(self, now: datetime) -> dict[str, Any]:
        """What admins see in listings: everything but secret material, the circuit as of ``now``."""
        expires = self.old_secrets_end(now)
        old_live = sum(1 for old in self.old_secrets_expire if old > now)
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
            "liveSecrets": self.current_secrets + old_live,
            "previousSecretExpiresAt": format_timestamp(expires) if expires is not None else None,
        }


@dataclass(frozen=True, slots=True)
class NewPartner:
    name: str
    url: str
    events: tuple[str, ...] | None
    max_in_flight: int | None = None
    batch: BatchPolicy | None = None


def _partner(row: RowMapping, expiries: Sequence[datetime | None] = ()) -> Partner:
    """A partner from its row and the expiry of each secret it has stored (None: the current one)."""
    kinds = json.loads(row["events"]) if row["events"] is not None else None
    return Partner(
        id=row["id"],
        name=row["name"],
        url=row["url"],
        events=tuple(kinds) if kinds is not None else None,
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        old_secrets_expire=tuple(expires for expires in expiries if expires is not None),
        current_secrets=sum(1 for expires in expiries if expires is None),
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


def _name_errors(name: object) -> list[FieldError]:
    if not isinstance(name, str):
        return [FieldError("name", "invalid_type", "Must be a string.")]
    if (fault := line_fault(name)) is not None:
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
        return [
            FieldError("maxInFlight", "invalid", f"Must be a whole number from 1 to {MAX_IN_FLIGHT_LIMIT}.")
        ]
    return []


def _unknown_members(data: Mapping[str, Any]) -> list[FieldError]:
    return [
        FieldError(str(key), "unknown_field", "This member is not accepted.")
        for key in data
        if key not in MEMBERS
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
    batch, batch_faults = batch_errors(data.get("batch"))
    errors.extend(batch_faults)
    errors.extend(unsubscribed(batch, kinds))
    cap = data.get("maxInFlight")
    errors += _cap_errors(cap)
    if errors:
        raise InvalidInput(errors=errors)
    name, url = data["name"], data["url"]
    assert isinstance(name, str) and isinstance(url, str) and (cap is None or isinstance(cap, int))
    return NewPartner(name=name.strip(), url=url, events=kinds, max_in_flight=cap, batch=batch)


def unsubscribed(batch: BatchPolicy | None, kinds: Collection[str] | None) -> list[FieldError]:
    """A field error for each kind ``batch`` would batch that a partner receiving ``kinds`` (None:
    every kind) never receives."""
    if batch is None or kinds is None:
        return []
    message = "Batch only kinds the partner receives."
    return [
        FieldError(f"batch.events.{index}", "not_subscribed", message)
        for index, kind in enumerate(batch.events)
        if kind not in kinds
    ]


_KEEP: Any = object()  # a PartnerChange member the update leaves as stored


@dataclass(frozen=True, slots=True)
class PartnerChange:
    """What an update sets: only the members it names (``events``/``maxInFlight`` null: the default)."""

    values: Mapping[str, Any]  # partners table columns -> new values
    url: str | None = None  # a new URL, to be checked as at onboarding
    events: tuple[str, ...] | None = _KEEP  # the kinds it will receive (None: every kind)
    batch: BatchPolicy | None = _KEEP  # how it will batch (None: not at all)

    def faults_against(self, stored: Partner) -> list[FieldError]:
        """Where an update of one of ``events`` and ``batch`` leaves the other disagreeing with it, as
        onboarding refuses: a kind batched that the partner would not receive."""
        if (self.events is _KEEP) == (self.batch is _KEEP):
            return []  # neither changes, or both do (then checked with the body)
        events = stored.events if self.events is _KEEP else self.events
        return unsubscribed(stored.batch if self.batch is _KEEP else self.batch, events)


def validate_partner_change(data: Mapping[str, Any]) -> PartnerChange:
    """An update body, strictly: at least one of ``{name, url, events, batch, maxInFlight}``;
    ``events`` null means every kind again, ``batch`` null no batching, ``maxInFlight`` null the
    default cap. Deliveries waiting for a batch of a kind no longer batched go out alone."""
    errors = _unknown_members(data)
    if not data:
        errors.append(FieldError("body", "missing", f"Name at least one of: {', '.join(sorted(MEMBERS))}."))
    values: dict[str, Any] = {}
    kinds: tuple[str, ...] | None = _KEEP
    batch: BatchPolicy | None = _KEEP
    if "name" in data:
        errors += _name_errors(data["name"])
        values["name"] = data["name"].strip() if isinstance(data["name"], str) else None
    if "url" in data:
        errors += _url_errors(data["url"])
        values["url"] = data["url"]
    if "events" in data:
        kinds = None
        if data["events"] is not None:
            kinds, event_errors = _events_filter(data["events"])
            errors.extend(event_errors)
        values["events"] = json.dumps(list(kinds)) if kinds is not None else None
    if "maxInFlight" in data:
        errors += _cap_errors(data["maxInFlight"])
        values["max_in_flight"] = data["maxInFlight"]
    if "batch" in data:
        batch, batch_faults = batch_errors(data["batch"])
        errors += batch_faults
        if "events" in data and data["events"] is not None and not batch_faults:
            wanted = data["events"] if isinstance(data["events"], list) else []
            errors.extend(unsubscribed(batch, wanted))
        values["batch"] = batch.dumps() if batch is not None else None
    if errors:
        raise InvalidInput(errors=errors)
    url = values.get("url")
    return PartnerChange(values=values, url=url if isinstance(url, str) else None, events=kinds, batch=batch)


async def check_destination(url: str, *, allow_private: bool, resolve: Resolve = system_resolve) -> None:
    """Refuse a URL the service must not call (shape, scheme, internal address) as a field error."""
    try:
        await check_url(url, allow_private=allow_private, resolve=resolve)
    except UnsafeURL as error:
        raise InvalidInput(errors=[FieldError("url", error.code, str(error))]) from None


# --- storage ----------------------------------------------------------------------------------


# Written with every change to what a claim reads to send a partner's deliveries: its status, URL,
# secrets, cap and batch policy, and its circuit opening. A worker compares the revision its
# parked jobs were claimed under with the partner's now (``revisions``) and hands back the stale
# ones, so a pause, a removal, a new URL or a new secret reaches deliveries claimed ahead of it.
REVISED = {"revision": partners.c.revision + 1}
_CLAIM_READS = frozenset({"url", "max_in_flight"})  # of the columns a change may set (a name does not)
_REVISIONS = select(partners.c.id, partners.c.revision).where(
    partners.c.id.in_(bindparam("b_ids", expanding=True))
)


async def revisions(conn: AsyncConnection, partner_ids: Collection[str]) -> dict[str, int]:
    """Each partner's revision now (``REVISED``)."""
    found = await conn.execute(_REVISIONS, {"b_ids": list(partner_ids)})
    return {partner_id: revision for partner_id, revision in found}


async def create_partner(
    conn: AsyncConnection,
    new: NewPartner,
    *,
    now: datetime,
    keyring: Keyring,
    secret: str | None = None,
    partner_id: str | None = None,
) -> Partner:
    """Store a new partner with ``secret`` (a new one if not given), sealed."""
    partner = Partner(
        id=partner_id or new_partner_id(),
        name=new.name,
        url=new.url,
        events=new.events,
        status=PartnerStatus.ACTIVE,
        created_at=now,
        updated_at=now,
        max_in_flight=new.max_in_flight,
        batch=new.batch,
    )
    await conn.execute(
        partners.insert().values(
            id=partner.id,
            name=partner.name,
            url=partner.url,
            events=json.dumps(list(new.events)) if new.events is not None else None,
            status=PartnerStatus.ACTIVE,
            max_in_flight=new.max_in_flight,
            batch=new.batch.dumps() if new.batch is not None else None,
            created_at=now,
            updated_at=now,
        )
    )
    await _add_secret(conn, partner.id, secret or new_secret(), now=now, keyring=keyring)
    return partner


# A digest is written once: processes starting together (servers and workers after an upgrade) may
# each find one missing, and a secret handed in again (``rotate_secret(secret=...)``) has one.
_KEEP_DIGEST = {
    name: dialect.insert(secret_digests).on_conflict_do_nothing()
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


async def _add_secret(
    conn: AsyncConnection, partner_id: str, secret: str, *, now: datetime, keyring: Keyring
) -> None:
    """Store ``secret`` sealed as the partner's current one, and its digest for good."""
    sealed = keyring.seal(secret)
    await conn.execute(
        partner_secrets.insert().values(partner_id=partner_id, secret=sealed, created_at=now, expires_at=None)
    )
    digest = {"partner_id": partner_id, "digest": secret_digest(secret), "created_at": now}
    await conn.execute(_KEEP_DIGEST[conn.dialect.name].values(digest))


async def digests(conn: AsyncConnection, partner_id: str) -> frozenset[str]:
    """The digests of every secret the partner was issued (``signing.secret_digest``)."""
    mine = secret_digests.c.partner_id == partner_id
    return frozenset(await conn.scalars(select(secret_digests.c.digest).where(mine)))


async def record_digests(conn: AsyncConnection, keyring: Keyring, *, now: datetime) -> int:
    """Write the digest of each stored secret that has none (one stored before digests were kept),
    opening it with ``keyring``; how many. A secret no key opens is left as it is."""
    kept = set(await conn.execute(select(secret_digests.c.partner_id, secret_digests.c.digest)))
    missing = set()
    for partner_id, stored in await conn.execute(_STORED):
        try:
            digest = secret_digest(keyring.open(stored))
        except UnreadableSecret:
            continue
        if (partner_id, digest) not in kept:
            missing.add((partner_id, digest))
    written = 0
    for partner_id, digest in sorted(missing):
        row = {"partner_id": partner_id, "digest": digest, "created_at": now}
        written += (await conn.execute(_KEEP_DIGEST[conn.dialect.name].values(row))).rowcount
    return written


_STORED = select(partner_secrets.c.partner_id, partner_secrets.c.secret)


# Each stored secret's expiry, none for the current one: what listings count, never the secrets.
_SECRETS = select(partner_secrets.c.partner_id, partner_secrets.c.expires_at)


async def list_partners(conn: AsyncConnection) -> list[Partner]:
    expiries: dict[str, list[datetime | None]] = {}
    for row in await conn.execute(_SECRETS):
        expiries.setdefault(row.partner_id, []).append(row.expires_at)
    result = await conn.execute(
        select(partners)
        .where(partners.c.status != PartnerStatus.REMOVED)
        .order_by(partners.c.created_at, partners.c.id)
    )
    return [_partner(row, expiries.get(row["id"], ())) for row in result.mappings()]


async def get_partner(conn: AsyncConnection, partner_id: str) -> Partner | None:
    result = await conn.execute(
        select(partners).where(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
    )
    row = result.mappings().first()
    if row is None:
        return None
    stored = await conn.execute(_SECRETS.where(partner_secrets.c.partner_id == partner_id))
    return _partner(row, [found.expires_at for found in stored])


async def set_status(
    conn: AsyncConnection, partner_id: str, status: PartnerStatus, *, now: datetime
) -> Partner | None:
    """Pause or resume; the write comes first so SQLite never upgrades a read lock."""
    values: dict[str, Any] = {"status": status, "updated_at": now, **REVISED}
    if (
        status == PartnerStatus.ACTIVE
    ):  # a resume starts the partner afresh: circuit closed, no failures counted
        values.update(
            consecutive_failures=0, failing_since=None, circuit_open_until=None, circuit_cooldown=None
        )
    changed = await conn.execute(
        update(partners)
        .where(
            partners.c.id == partner_id,
            partners.c.status != status,
            partners.c.status != PartnerStatus.REMOVED,
        )
        .values(**values)
    )
    if changed.rowcount and status == PartnerStatus.ACTIVE:
        await notify(conn)  # its waiting deliveries are claimable again
    return await get_partner(conn, partner_id)


def _expired(now: datetime) -> Any:
    return partner_secrets.c.expires_at.is_not(None) & (partner_secrets.c.expires_at <= now)


async def live_secrets(
    conn: AsyncConnection, partner_id: str, *, now: datetime, keyring: Keyring
) -> list[str]:
    """The partner's secrets that sign at ``now``, newest first, opened; expired ones are deleted."""
    await conn.execute(
        delete(partner_secrets).where(partner_secrets.c.partner_id == partner_id, _expired(now))
    )
    result = await conn.execute(
        select(partner_secrets.c.secret)
        .where(partner_secrets.c.partner_id == partner_id)
        .order_by(partner_secrets.c.id.desc())
    )
    return [keyring.open(stored) for stored in result.scalars()]


async def delete_expired_secrets(conn: AsyncConnection, *, now: datetime) -> int:
    """Delete every secret whose overlap has ended, across partners; how many went."""
    result = await conn.execute(delete(partner_secrets).where(_expired(now)))
    return int(result.rowcount)


async def set_batch(
    conn: AsyncConnection, partner_id: str, policy: BatchPolicy | None, *, now: datetime
) -> bool:
    """Change the partner's batch policy; whether the partner exists. Deliveries waiting for a batch
    of a kind no longer batched go out alone at the next claim; events published from now on
    follow the new policy."""
    result = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
        .values(batch=policy.dumps() if policy is not None else None, updated_at=now, **REVISED)
    )
    return bool(result.rowcount)


async def rotate_secret(
    conn: AsyncConnection,
    partner_id: str,
    *,
    now: datetime,
    overlap: float,
    keyring: Keyring,
    secret: str | None = None,
) -> tuple[Partner, str] | None:
    """A new current secret; the ones live until now sign until ``now + overlap`` at the latest
    (an old secret's earlier expiry is kept), and those whose time is up are deleted.

    A partner that had no secret (``discard_unreadable``) has had what fell due handed back at
    each claim, due a lease later (``claim.claim_due``): with its new secret, what waits is due now.
    """
    fresh = secret or new_secret()
    # The write comes first, so SQLite never upgrades a read lock (and PostgreSQL holds the
    # partner's row until commit: two rotations of one partner take turns).
    result = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
        .values(updated_at=now, **REVISED)
    )
    if result.rowcount == 0:
        return None
    ends = now + timedelta(seconds=overlap)
    mine = partner_secrets.c.partner_id == partner_id
    held = await conn.scalar(select(partner_secrets.c.id).where(mine, ~_expired(now)).limit(1))
    await conn.execute(
        update(partner_secrets)
        .where(mine, (partner_secrets.c.expires_at.is_(None)) | (partner_secrets.c.expires_at > ends))
        .values(expires_at=ends)
    )
    await conn.execute(delete(partner_secrets).where(mine, _expired(now)))
    await _add_secret(conn, partner_id, fresh, now=now, keyring=keyring)
    if held is None:
        await _waiting_due_now(conn, partner_id, now)
        await notify(conn)  # its waiting deliveries are claimable now
    partner = await get_partner(conn, partner_id)
    assert partner is not None
    return partner, fresh


async def reseal_secrets(conn: AsyncConnection, keyring: Keyring, *, plaintext_only: bool = False) -> int:
    """Seal every stored secret under the newest key (or only the plaintext ones); how many changed.

    Raises ``service.keyring.UnreadableSecret`` when a secret was sealed with a key no longer listed.
    """
    query = select(partner_secrets.c.id, partner_secrets.c.secret).order_by(partner_secrets.c.id)
    if plaintext_only:
        query = query.where(partner_secrets.c.secret.not_like(f"{SEALED}%"))
    changed = 0
    for row in (await conn.execute(query)).all():
        resealed = keyring.reseal(row.secret)
        if resealed != row.secret:
            await conn.execute(
                update(partner_secrets).where(partner_secrets.c.id == row.id).values(secret=resealed)
            )
            changed += 1
    return changed


async def unopened_secrets(
    conn: AsyncConnection, keyring: Keyring, *, now: datetime
) -> tuple[int, list[int]]:
    """The sealed secrets that sign at ``now``: how many are stored, and the ids of those no key of
    ``keyring`` opens (sealed under a key since dropped, or under another deployment's)."""
    live = select(partner_secrets.c.id, partner_secrets.c.secret).where(
        partner_secrets.c.secret.like(f"{SEALED}%"), ~_expired(now)
    )
    stored = 0
    unopened = []
    for row in await conn.execute(live):
        stored += 1
        if not keyring.opens(row.secret):
            unopened.append(row.id)
    return stored, unopened


async def discard_unreadable(conn: AsyncConnection, keyring: Keyring, *, now: datetime) -> int:
    """Delete the secrets no key of ``keyring`` opens: the way back when every key that sealed them
    is lost. Their partners sign with what is left, or wait for a rotation."""
    _, unopened = await unopened_secrets(conn, keyring, now=now)
    if unopened:
        await conn.execute(delete(partner_secrets).where(partner_secrets.c.id.in_(unopened)))
    return len(unopened)


async def without_secret(conn: AsyncConnection) -> list[str]:
    """Ids of the partners (not removed) with no secret stored: they wait until ``rotate-secret``."""
    held = select(partner_secrets.c.partner_id).where(partner_secrets.c.partner_id == partners.c.id)
    result = await conn.execute(
        select(partners.c.id)
        .where(partners.c.status != PartnerStatus.REMOVED, ~held.exists())
        .order_by(partners.c.id)
    )
    return list(result.scalars())


async def seal_plaintext(conn: AsyncConnection, keyring: Keyring) -> int:
    """Seal the secrets stored before sealing (migration 0005 moved them in plaintext)."""
    return await reseal_secrets(conn, keyring, plaintext_only=True)


async def update_partner(
    conn: AsyncConnection, partner_id: str, change: PartnerChange, *, now: datetime
) -> Partner | None:
    """Apply ``change`` to a partner that is not removed; None when there is no such partner.

    Deliveries not yet sent go to the new URL (claims read it); new events follow the new filter;
    deliveries already made for earlier events stay as they are.
    """
    revised = REVISED if _CLAIM_READS.intersection(change.values) else {}
    changed = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
        .values(**change.values, updated_at=now, **revised)
    )
    return await get_partner(conn, partner_id) if changed.rowcount else None


async def remove_partner(conn: AsyncConnection, partner_id: str, *, now: datetime) -> int | None:
    """Remove a partner: its undelivered deliveries become ``cancelled``; how many, or None when
    there is no such partner.

    The row stays, without its secrets, so the deliveries and attempts already logged still name
    it (retention prunes them in time); listings and lookups no longer see it. A delivery in flight
    loses its claim token here, so its worker's answer cannot settle it afterwards.

    The partner's row is changed first and its deliveries cancelled after, in a statement of its
    own, so the cancelling sees every delivery committed until then: a publish that read the
    partner as active before this committed may still add one after
    (``retention.cancel_stranded`` cancels it within the hour). A worker's turn settling the
    partner's attempts takes the same order (``settle.record`` locks the partners' rows first), so
    on PostgreSQL one waits for the other. What else a turn does locks a partner's deliveries, and
    its expired secrets, without its row (handing back, claiming, forming batches); meeting one
    of those, the two may still deadlock, and the caller runs the removal again when PostgreSQL
    ends it (``Operations.remove``).
    """
    removed = await conn.execute(
        update(partners)
        .where(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
        .values(status=PartnerStatus.REMOVED, updated_at=now, **REVISED)
    )
    if not removed.rowcount:
        return None
    await conn.execute(delete(partner_secrets).where(partner_secrets.c.partner_id == partner_id))
    cancelled = await conn.execute(
        update(deliveries)
        .where(deliveries.c.partner_id == partner_id, deliveries.c.status.in_(UNDELIVERED))
        .values(status=DeliveryStatus.CANCELLED, claim_token=None, claimed_until=None, updated_at=now)
    )
    return int(cancelled.rowcount)


class Standing(NamedTuple):
    """A partner's status and circuit, as a batch of attempts finds them."""

    status: PartnerStatus
    breaker: BreakerState


class PartnerEffect(NamedTuple):
    """What a batch of attempts does to one partner (``service.webhooks.settle.effects``)."""

    partner_id: str
    breaker: BreakerState | None = None  # its circuit's new state; None: as it was
    pause: bool = False  # it answered 410 Gone while active
    disable: bool = False  # it has failed without a break for too long, while active
    changes: tuple[CircuitChange, ...] = ()  # what its circuit did, for logs and metrics


# Built once (every turn that logs attempts reads it), the ids as one expanding parameter.
_STANDING = select(
    partners.c.id,
    partners.c.status,
    partners.c.consecutive_failures,
    partners.c.failing_since,
    partners.c.circuit_open_until,
    partners.c.circuit_cooldown,
).where(partners.c.id.in_(bindparam("b_ids", expanding=True)))
# FOR NO KEY UPDATE, not FOR UPDATE: it takes turns with every other writer of the row, but not
# with a publish storing a delivery for the partner (the foreign key's check takes FOR KEY SHARE,
# which only FOR UPDATE refuses). Under FOR UPDATE a publish fanning out to two partners in one
# order and a turn locking them in the other deadlocked, and PostgreSQL ended the publish: a 503.
# In the order of their ids (PostgreSQL locks the rows after sorting them), whatever order they lie
# in: two turns settling the same partners take them in the same order.
_STANDING_LOCKED = _STANDING.order_by(partners.c.id).with_for_update(key_share=True)


async def lock_standing(conn: AsyncConnection, partner_ids: Sequence[str]) -> dict[str, Standing]:
    """The partners' standing, their rows locked until the transaction ends on PostgreSQL (two
    workers settling one partner take turns; SQLite's one writer already does). A publish storing
    deliveries for them meanwhile does not wait."""
    if not partner_ids:
        return {}
    query = _STANDING_LOCKED if conn.dialect.name == "postgresql" else _STANDING
    return {
        row.id: Standing(
            PartnerStatus(row.status),
            BreakerState(
                row.consecutive_failures, row.failing_since, row.circuit_open_until, row.circuit_cooldown
            ),
        )
        for row in await conn.execute(query, {"b_ids": list(partner_ids)})
    }


async def apply(conn: AsyncConnection, effects: Sequence[PartnerEffect], *, now: datetime) -> None:
    """Write what attempts did to their partners: circuits moved, partners paused or disabled."""
    for effect in effects:
        values: dict[str, Any] = {}
        if effect.breaker is not None:
            values.update(
                consecutive_failures=effect.breaker.consecutive_failures,
                failing_since=effect.breaker.failing_since,
                circuit_open_until=effect.breaker.open_until,
                circuit_cooldown=effect.breaker.cooldown,
            )
        if effect.pause or effect.disable:
            status = PartnerStatus.PAUSED if effect.pause else PartnerStatus.DISABLED
            values.update(status=status, updated_at=now)
        if effect.pause or effect.disable or STOPPING.intersection(effect.changes):
            values.update(REVISED)  # what a worker claimed ahead for it goes back (``REVISED``)
        if values:
            await conn.execute(update(partners).where(partners.c.id == effect.partner_id).values(**values))


async def lock_partner(conn: AsyncConnection, partner_id: str) -> bool:
    """Hold the partner's row until the transaction ends, by a write that changes nothing: SQLite
    then never upgrades a read lock, and on PostgreSQL a concurrent change, or a worker settling the
    partner's circuit, waits its turn. What is read after it is what the transaction writes over.
    False when there is no such partner (or it was removed)."""
    mine = and_(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
    locked = await conn.execute(update(partners).where(mine).values(status=partners.c.status))
    return bool(locked.rowcount)


async def resume_partner(conn: AsyncConnection, partner_id: str, *, now: datetime) -> Partner | None:
    """Make the partner active and try it now (``breaker.resumed``): an open circuit turns half-open
    and what it held is due now, so one probe goes at the next claim and, once it succeeds, the
    rest follow; None when there is no such partner.

    A circuit closed or already half-open starts afresh (closed, no failures counted); resuming an
    active partner with nothing to start afresh changes nothing.
    """
    mine = and_(partners.c.id == partner_id, partners.c.status != PartnerStatus.REMOVED)
    if not await lock_partner(conn, partner_id):
        return None
    partner = await get_partner(conn, partner_id)
    assert partner is not None
    breaker = resumed(partner.breaker, now, lift_disable=partner.status == PartnerStatus.DISABLED)
    if partner.status == PartnerStatus.ACTIVE and breaker == partner.breaker:
        return partner
    await conn.execute(
        update(partners)
        .where(mine)
        .values(
            status=PartnerStatus.ACTIVE,
            updated_at=now,
            **REVISED,
            consecutive_failures=breaker.consecutive_failures,
            failing_since=breaker.failing_since,
            circuit_open_until=breaker.open_until,
            circuit_cooldown=breaker.cooldown,
        )
    )
    if breaker.open_until is not None:
        # "Now" for what the circuit held too: the probe goes at once (not at its retry's time),
        # and on its success the rest follow at once.
        await _waiting_due_now(conn, partner_id, now)
    await notify(conn)  # its waiting deliveries (or its probe) are claimable now
    return await get_partner(conn, partner_id)


async def _waiting_due_now(conn: AsyncConnection, partner_id: str, now: datetime) -> None:
    """Make the partner's pending deliveries due now, whatever they were waiting for."""
    await conn.execute(
        update(deliveries)
        .where(
            deliveries.c.partner_id == partner_id,
            deliveries.c.status == DeliveryStatus.PENDING,
            deliveries.c.next_attempt_at > now,
        )
        .values(next_attempt_at=now, updated_at=now)
    )
