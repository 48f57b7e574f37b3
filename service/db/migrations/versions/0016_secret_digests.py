"""secret_digests: the SHA-256 of every partner secret's key, kept after the secret is deleted

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29 06:30:00.000000

The digests of the secrets stored before this revision are written at the next start, which
opens them (``wiring.seal``): a migration holds no key.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.db.tables import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secret_digests",
        sa.Column("partner_id", sa.String(length=40), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["partner_id"],
            ["partners.id"],
            name=op.f("fk_secret_digests_partner_id_partners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("partner_id", "digest", name=op.f("pk_secret_digests")),
    )


def downgrade() -> None:
    op.drop_table("secret_digests")
