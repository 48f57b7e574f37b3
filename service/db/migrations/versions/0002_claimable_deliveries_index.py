"""partial index of claimable deliveries, replacing ix_deliveries_due

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 11:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

CLAIMABLE = sa.text("status IN ('pending', 'delivering')")


def upgrade() -> None:
    # Workers claim in next_attempt_at order among pending and delivering rows only; the index
    # holds just those, so a claim reads a few index entries however large the delivered history.
    # ix_deliveries_due (status, next_attempt_at) goes: planners chose it for the claim's
    # two-status test and then sorted every due row before the LIMIT.
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_deliveries_due")
    op.create_index(
        "ix_deliveries_claimable",
        "deliveries",
        ["next_attempt_at"],
        unique=False,
        sqlite_where=CLAIMABLE,
        postgresql_where=CLAIMABLE,
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_claimable", table_name="deliveries")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_due", ["status", "next_attempt_at"], unique=False)
