"""workers: one row per running delivery worker, written as it runs (its heartbeat)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.db.tables import UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("loop", sa.String(length=16), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer().with_variant(sa.BigInteger(), "postgresql"), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("seen_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )


def downgrade() -> None:
    op.drop_table("workers")
