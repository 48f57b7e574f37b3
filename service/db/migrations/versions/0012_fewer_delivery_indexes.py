"""two fewer entries a delivery's row writes: no partner_id index of its own, batch_id partial

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 10:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BATCHED = sa.text("batch_id IS NOT NULL")


def upgrade() -> None:
    # A status change can never be a heap-only update (status is in the partial indexes'
    # predicates), so every claim and every settle writes an entry into each whole-table index.
    # ix_deliveries_partner_created (partner_id, created_at, id) answers whatever this one did.
    op.drop_index("ix_deliveries_partner_id", table_name="deliveries")
    # Only batches' members have a batch_id; the rest (almost every row) need no entry here.
    op.drop_index("ix_deliveries_batch_id", table_name="deliveries")
    op.create_index(
        "ix_deliveries_batch_id",
        "deliveries",
        ["batch_id"],
        unique=False,
        sqlite_where=BATCHED,
        postgresql_where=BATCHED,
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_batch_id", table_name="deliveries")
    op.create_index("ix_deliveries_batch_id", "deliveries", ["batch_id"], unique=False)
    op.create_index("ix_deliveries_partner_id", "deliveries", ["partner_id"], unique=False)
