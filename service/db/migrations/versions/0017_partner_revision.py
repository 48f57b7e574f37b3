"""partners.revision: counted up by every change to what a claim reads to send a partner's deliveries

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 07:40:00.000000

A worker claims a partner's deliveries ahead of its free slots and sends them as slots free up.
Before each turn's commit it compares the revision its parked jobs were claimed under with the
partner's now, and hands back those of a partner paused, removed, re-addressed or given a new
secret since (``worker._changed_since_claim``). A counter, not ``updated_at``: two changes within
one clock tick (or a clock set back) would leave a time unchanged.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partners") as batch:
        batch.add_column(sa.Column("revision", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("partners") as batch:
        batch.drop_column("revision")
