"""The schema, in one place. Alembic migrations are written to match it.

Times are stored as naive UTC and read back as aware UTC (``UTCDateTime``), the same on SQLite and
PostgreSQL, so no code ever compares a naive datetime with an aware one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from service.states import CLAIMABLE_IN

# Stable constraint names make Alembic migrations identical on both databases.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


# Marks (in ``info``) an index that only SQLite has; ``declared_on`` leaves it out elsewhere.
SQLITE_ONLY = {"dialect": "sqlite"}


def declared_on(dialect: str, item: Any) -> bool:
    """Whether the schema declares ``item`` (an index, a table...) on ``dialect``: Alembic's
    ``include_object`` filter, as Alembic does not read ``ddl_if``."""
    only = getattr(item, "info", {}).get("dialect")
    return only is None or only == dialect


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC in Python, naive UTC in the database; naive input is refused, never guessed."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; pass an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite through raw SQL paths
            value = datetime.fromisoformat(value)
        moment: datetime = value.replace(tzinfo=UTC)
        return moment


registrations = Table(
    "registrations",
    metadata,
    Column("id", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True),
    Column("email", String(320), nullable=False),  # as submitted, trimmed
    Column("email_key", String(320), nullable=False),  # lower-cased: the identity of an address
    Column("intent", String(16), nullable=False),
    Column("project", String(120)),
    Column("message", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    UniqueConstraint("email_key", "intent", name="uq_registrations_email_key_intent"),
)
Index("ix_registrations_created_at", registrations.c.created_at)

partners = Table(
    "partners",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("events", Text),  # JSON array of event kinds, NULL for every kind
    Column("status", String(16), nullable=False),  # active | paused | disabled
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("max_in_flight", Integer),  # NULL: SERVICE_WEBHOOK_MAX_IN_FLIGHT
    # The circuit breaker (service.webhooks.breaker): failed attempts in a row, since when, and
    # while open, until when no attempt is made and how long the last cool-down was.
    Column("consecutive_failures", Integer, nullable=False, server_default="0"),
    Column("failing_since", UTCDateTime()),
    Column("circuit_open_until", UTCDateTime()),
    Column("circuit_cooldown", Float),
    # Batched delivery (service.webhooks.batching): JSON {"events", "maxEvents", "maxWaitSeconds"}.
    Column("batch", Text),
    # Counted up by every change to what a claim reads to send its deliveries (status, URL,
    # secrets, cap, batch policy, a circuit opening): a worker hands back the deliveries it claimed
    # ahead under an older revision (service.webhooks.worker). Migration 0017.
    Column("revision", Integer, nullable=False, server_default="0"),
)

# Every secret a partner's deliveries are signed with: the current one (expires_at NULL) and
# those a rotation left signing until their expiry. Stored sealed (service.keyring); a row whose
# expiry has passed is deleted, never kept.
partner_secrets = Table(
    "partner_secrets",
    metadata,
    Column("id", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True),
    Column("partner_id", String(40), ForeignKey("partners.id", ondelete="CASCADE"), nullable=False),
    Column("secret", Text, nullable=False),  # "fernet:" + token; plaintext only before sealing
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime()),  # NULL: the current secret
)
Index("ix_partner_secrets_partner_id", partner_secrets.c.partner_id)
# What is kept of every secret issued once the secret itself is deleted: the SHA-256 of its key
# (signing.secret_digest). A partner that echoes a secret its rotation retired, without the whsec_
# prefix, is known by it, and the excerpt of its answer keeps "[secret]" in its place (send.py).
secret_digests = Table(
    "secret_digests",
    metadata,
    Column("partner_id", String(40), ForeignKey("partners.id", ondelete="CASCADE"), primary_key=True),
    Column("digest", String(64), primary_key=True),
    Column("created_at", UTCDateTime(), nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("id", String(64), primary_key=True),  # the payload's eventId
    Column("kind", String(64), nullable=False),
    Column("dedupe_key", String(1024), nullable=False, unique=True),
    Column("payload", Text, nullable=False),  # the exact JSON body every delivery sends
    Column("occurred_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)
Index("ix_events_created_at", events.c.created_at)  # the sitemap's newest-first room scan

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", String(40), primary_key=True),  # x-service-delivery, the same on every retry
    Column("event_id", String(64), ForeignKey("events.id"), nullable=False),
    Column("partner_id", String(40), ForeignKey("partners.id"), nullable=False),
    Column("status", String(16), nullable=False),  # pending | delivering | delivered | failed
    Column("attempts", Integer, nullable=False, default=0),  # attempts logged; the next is attempts + 1
    Column("next_attempt_at", UTCDateTime(), nullable=False),
    Column("claimed_until", UTCDateTime()),
    Column("claim_token", String(40)),
    # The worker that made the claim (each worker run names itself): a worker lets out as many of a
    # partner's deliveries at once as the partner's cap leaves after the other workers' claims.
    Column("claimed_by", String(40)),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime()),
    # A batch's own delivery carries its fixed body (every retry sends these bytes); its members
    # (one per batched event) point to it. Both NULL for a delivery sent alone.
    Column("body", Text),
    Column("batch_id", String(40)),
)
# What workers claim from, in due order: only pending and delivering rows, so the index stays the
# size of the queue however many delivered rows accumulate (a partial index on both databases).
# It replaced ix_deliveries_due (status, next_attempt_at), which planners preferred for the claim
# and then sorted every due row before the LIMIT (migration 0002).
CLAIMABLE_WHERE = text(f"status {CLAIMABLE_IN}")
Index(
    "ix_deliveries_claimable",
    deliveries.c.next_attempt_at,
    sqlite_where=CLAIMABLE_WHERE,
    postgresql_where=CLAIMABLE_WHERE,
)
# No index of partner_id alone: ix_deliveries_partner_created (below) leads with it, and each index
# on the whole table costs every claim and every settle an entry (migration 0012).
# An event's deliveries: retention asks whether an event has any left, and deleting an event checks
# its foreign key here (migration 0008).
Index("ix_deliveries_event_id", deliveries.c.event_id)
# Each partner's live claims, counted by every claim (the per-partner in-flight cap).
IN_FLIGHT = text("status = 'delivering'")
Index("ix_deliveries_in_flight", deliveries.c.partner_id, sqlite_where=IN_FLIGHT, postgresql_where=IN_FLIGHT)
# Each partner's due rows in due order, for claims that serve partners in turn.
Index(
    "ix_deliveries_partner_claimable",
    deliveries.c.partner_id,
    deliveries.c.next_attempt_at,
    sqlite_where=CLAIMABLE_WHERE,
    postgresql_where=CLAIMABLE_WHERE,
)

# Batched kinds waiting for their batch, per partner in due order (a batch forms when its oldest
# member's next_attempt_at, the moment it has waited maxWaitSeconds, passes).
BATCHING = text("status = 'batching'")
Index(
    "ix_deliveries_batching",
    deliveries.c.partner_id,
    deliveries.c.next_attempt_at,
    sqlite_where=BATCHING,
    postgresql_where=BATCHING,
)
# On SQLite the table has no rowid: it is keyed by (partner_id, id), so a partner's rows are stored
# together (migration 0013). A rowid table keeps rows in insertion order, one event's deliveries to
# every partner side by side, and a claim or settle of 512 of one partner's rows beside ten other
# partners' backlogs wrote eleven times the pages it did alone (benchmarks/delivery.py
# --isolation). Lookups by id, and delivery_attempts' foreign key, go through this unique index.
# PostgreSQL's heap keeps rows in no such order; there the primary key (id) is all it needs.
Index("ux_deliveries_id", deliveries.c.id, unique=True, info=SQLITE_ONLY).ddl_if(dialect="sqlite")
# A batch's members, found from their batch (only members have a batch_id; migration 0012).
BATCHED = text("batch_id IS NOT NULL")
Index("ix_deliveries_batch_id", deliveries.c.batch_id, sqlite_where=BATCHED, postgresql_where=BATCHED)
# Each partner's deliveries whose schedule is spent, counted by every metrics scrape
# (service_webhook_failed_deliveries) and requeued by an admin retry (migration 0009).
FAILED = text("status = 'failed'")
Index("ix_deliveries_failed", deliveries.c.partner_id, sqlite_where=FAILED, postgresql_where=FAILED)
# The console's status filter for the statuses that are few beside the delivered history, newest
# first; a row enters one only when it reaches that status, never on a claim or a settle that
# delivers (migration 0015).
CANCELLED = text("status = 'cancelled'")
Index(
    "ix_deliveries_failed_created",
    deliveries.c.created_at,
    deliveries.c.id,
    sqlite_where=FAILED,
    postgresql_where=FAILED,
)
Index(
    "ix_deliveries_cancelled_created",
    deliveries.c.created_at,
    deliveries.c.id,
    sqlite_where=CANCELLED,
    postgresql_where=CANCELLED,
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("id", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True),
    Column("delivery_id", String(40), ForeignKey("deliveries.id"), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("event", String(64), nullable=False),  # the event kind, denormalised for analysis
    Column("partner_id", String(40), nullable=False),
    Column("attempt", Integer, nullable=False),  # 1 for the first try
    Column("started_at", UTCDateTime(), nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Column("status_code", Integer),  # NULL when no HTTP answer came
    Column("error_class", String(64)),  # NULL on success; e.g. timeout, connect, http_500, ssrf
    Column("response_excerpt", String(512)),  # first bytes of the answer, bounded
    Column("outcome", String(16), nullable=False),  # delivered | retry | failed | paused
)
Index("ix_delivery_attempts_delivery_id", delivery_attempts.c.delivery_id)
Index("ix_delivery_attempts_started_at", delivery_attempts.c.started_at)

# The operator console (service.db.summaries): its listings page newest first by (created_at, id),
# with or without a filter, and the partner page counts one partner's attempts over a day
# (migration 0010). No (status, ...) index: SQLite, planning without statistics, would read the
# metrics scrape's `status IN (pending, delivering)` through it instead of ix_deliveries_claimable.
Index("ix_registrations_created_id", registrations.c.created_at, registrations.c.id)
Index(
    "ix_registrations_intent_created", registrations.c.intent, registrations.c.created_at, registrations.c.id
)
Index("ix_deliveries_created", deliveries.c.created_at, deliveries.c.id)
Index("ix_deliveries_partner_created", deliveries.c.partner_id, deliveries.c.created_at, deliveries.c.id)
Index("ix_delivery_attempts_partner_started", delivery_attempts.c.partner_id, delivery_attempts.c.started_at)

# The delivery workers running now, one row per worker run (service.webhooks.roster): each writes
# its row when it starts and every HEARTBEAT while it runs, and deletes it when it stops; a row
# left by a worker that died is listed as silent, then forgotten a day later.
workers = Table(
    "workers",
    metadata,
    Column("id", String(40), primary_key=True),  # the run's holder name (deliveries.claimed_by)
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("role", String(16), nullable=False),  # serve (inside the server) | worker (standalone)
    Column("loop", String(16), nullable=False),  # uvloop | asyncio
    Column("concurrency", Integer, nullable=False),
    Column("attempts", Integer().with_variant(BigInteger(), "postgresql"), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("seen_at", UTCDateTime(), nullable=False),
)
