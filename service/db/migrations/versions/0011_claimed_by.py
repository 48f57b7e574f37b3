"""deliveries.claimed_by: the worker holding a delivery's claim

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 23:15:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: adding it rewrites nothing on either database. Rows claimed before the
    # upgrade count as another worker's until they settle.
    op.add_column("deliveries", sa.Column("claimed_by", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("claimed_by")
