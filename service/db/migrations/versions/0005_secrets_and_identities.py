"""partner secrets in a table of their own (several live, sealed at rest); normalised email keys

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 22:10:00.000000

Secrets: each partner's ``secret`` becomes its current row of ``partner_secrets`` and a
``previous_secret`` whose overlap has not ended a row with that expiry (an ended one is dropped).
They move as they were, in plaintext: a migration has no key, so the service seals every
plaintext row under ``SERVICE_SECRETS_KEY`` when it next starts (``serve``, ``worker``, ``migrate``
and every partner command do, ``service.webhooks.partners.seal_plaintext``).

Registrations: ``email_key`` becomes email-validator's normalised form (``email_key``). Rows whose
keys now coincide for one intent are one registration (``service.db.rekey``). The downgrade leaves
keys as they are (each is still unique).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from service.db.rekey import rekey_registrations
from service.db.tables import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SEALED = "fernet:"


def _partners() -> sa.TableClause:
    return sa.table(
        "partners",
        sa.column("id", sa.String()),
        sa.column("secret", sa.String()),
        sa.column("previous_secret", sa.String()),
        sa.column("previous_secret_expires_at", UTCDateTime()),
        sa.column("created_at", UTCDateTime()),
        sa.column("updated_at", UTCDateTime()),
    )


def _secrets() -> sa.TableClause:
    return sa.table(
        "partner_secrets",
        sa.column("partner_id", sa.String()),
        sa.column("secret", sa.Text()),
        sa.column("created_at", UTCDateTime()),
        sa.column("expires_at", UTCDateTime()),
    )


def _partner_secrets() -> list[dict[str, Any]]:
    """Each partner's secrets as rows of ``partner_secrets``, read before the columns go."""
    bind = op.get_bind()
    now = datetime.now(UTC)
    partners = _partners()
    rows: list[dict[str, Any]] = []
    for row in bind.execute(sa.select(partners)):
        expires = row.previous_secret_expires_at
        if row.previous_secret and expires is not None and expires > now:
            rows.append(
                {
                    "partner_id": row.id,
                    "secret": row.previous_secret,
                    "created_at": row.created_at,
                    "expires_at": expires,
                }
            )
        rows.append(
            {"partner_id": row.id, "secret": row.secret, "created_at": row.updated_at, "expires_at": None}
        )
    return rows  # the previous secret first: ids grow with age, as rotations make them


def upgrade() -> None:
    moving = _partner_secrets()
    # The columns go first: on SQLite dropping them rebuilds the partners table, and dropping the
    # old table would cascade to partner_secrets rows already there.
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.drop_column("previous_secret_expires_at")
        batch_op.drop_column("previous_secret")
        batch_op.drop_column("secret")
    op.create_table(
        "partner_secrets",
        sa.Column("id", sa.Integer().with_variant(sa.BigInteger(), "postgresql"), nullable=False),
        sa.Column("partner_id", sa.String(length=40), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["partner_id"],
            ["partners.id"],
            name=op.f("fk_partner_secrets_partner_id_partners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_partner_secrets")),
    )
    op.create_index(op.f("ix_partner_secrets_partner_id"), "partner_secrets", ["partner_id"], unique=False)
    if moving:
        op.get_bind().execute(_secrets().insert(), moving)
    rekey_registrations(op.get_bind())


def downgrade() -> None:
    bind = op.get_bind()
    secrets = _secrets()
    sealed = bind.execute(
        sa.select(sa.func.count()).select_from(secrets).where(secrets.c.secret.startswith(SEALED))
    ).scalar_one()
    if sealed:
        raise RuntimeError(
            "partner secrets are encrypted; a release before 0005 reads only plaintext secrets, "
            "so this database cannot go back below 0005"
        )
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("secret", sa.String(length=128), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("previous_secret", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("previous_secret_expires_at", UTCDateTime(), nullable=True))
    partners = _partners()
    latest: dict[str, list[Any]] = {}
    for row in bind.execute(sa.select(secrets).order_by(secrets.c.created_at)):
        latest.setdefault(row.partner_id, []).append(row)
    for partner_id, rows in latest.items():
        current = [row for row in rows if row.expires_at is None] or rows
        older = [row for row in rows if row.expires_at is not None]
        values: dict[str, Any] = {"secret": current[-1].secret}
        if older:
            values.update(previous_secret=older[-1].secret, previous_secret_expires_at=older[-1].expires_at)
        bind.execute(partners.update().where(partners.c.id == partner_id).values(**values))
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.alter_column("secret", server_default=None)
    op.drop_index(op.f("ix_partner_secrets_partner_id"), table_name="partner_secrets")
    op.drop_table("partner_secrets")
