"""index on deliveries.event_id for retention pruning

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 22:50:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Pruning deletes events once no delivery names them: both that question and the foreign-key
    # check of each deleted event are then an index lookup, not a scan of every delivery.
    op.create_index("ix_deliveries_event_id", "deliveries", ["event_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_deliveries_event_id", table_name="deliveries")
