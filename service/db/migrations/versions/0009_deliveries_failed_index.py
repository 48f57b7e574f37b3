"""partial index on each partner's failed deliveries, for the metrics scrape

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 20:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FAILED = sa.text("status = 'failed'")


def upgrade() -> None:
    # Every scrape counts each partner's failed deliveries: through this index, a count of the few
    # failed rows, never a walk of the delivered history.
    op.create_index(
        "ix_deliveries_failed",
        "deliveries",
        ["partner_id"],
        unique=False,
        sqlite_where=FAILED,
        postgresql_where=FAILED,
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_failed", table_name="deliveries")
