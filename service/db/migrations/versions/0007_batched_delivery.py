"""batched delivery: a partner's batch policy, a batch's fixed body, members pointing to it

Revision ID: 0007
Revises: 0004
Create Date: 2026-11-23 22:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None

BATCHING = sa.text("status = 'batching'")


def upgrade() -> None:
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("batch", sa.Text(), nullable=True))
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("body", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("batch_id", sa.String(length=40), nullable=True))
    op.create_index(
        "ix_deliveries_batching",
        "deliveries",
        ["partner_id", "next_attempt_at"],
        unique=False,
        sqlite_where=BATCHING,
        postgresql_where=BATCHING,
    )
    op.create_index("ix_deliveries_batch_id", "deliveries", ["batch_id"], unique=False)


def downgrade() -> None:
    # Waiting and batched members go out alone again; the batches' own rows and attempts go.
    op.execute("UPDATE deliveries SET status = 'pending' WHERE status IN ('batching', 'batched')")
    op.execute(
        "DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE body IS NOT NULL)"
    )
    op.execute("DELETE FROM deliveries WHERE body IS NOT NULL")
    op.drop_index("ix_deliveries_batch_id", table_name="deliveries")
    op.drop_index("ix_deliveries_batching", table_name="deliveries")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_column("batch_id")
        batch_op.drop_column("body")
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.drop_column("batch")
