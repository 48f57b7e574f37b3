"""per-partner isolation: in-flight caps, circuit breaker state, honest attempt counts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 19:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

IN_FLIGHT = sa.text("status = 'delivering'")
CLAIMABLE = sa.text("status IN ('pending', 'delivering')")


def upgrade() -> None:
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_in_flight", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("failing_since", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("circuit_open_until", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("circuit_cooldown", sa.Float(), nullable=True))
    # `attempts` now counts logged attempts only; a claim no longer adds one in advance. Rows
    # claimed when this runs had their number spent by the claim: give it back.
    op.execute("UPDATE deliveries SET attempts = attempts - 1 WHERE status = 'delivering' AND attempts > 0")
    # A claim counts each partner's live claims: the index holds only claimed rows.
    op.create_index(
        "ix_deliveries_in_flight",
        "deliveries",
        ["partner_id"],
        unique=False,
        sqlite_where=IN_FLIGHT,
        postgresql_where=IN_FLIGHT,
    )
    # Claims take each partner's due rows in due order (fairness across partners).
    op.create_index(
        "ix_deliveries_partner_claimable",
        "deliveries",
        ["partner_id", "next_attempt_at"],
        unique=False,
        sqlite_where=CLAIMABLE,
        postgresql_where=CLAIMABLE,
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_partner_claimable", table_name="deliveries")
    op.drop_index("ix_deliveries_in_flight", table_name="deliveries")
    op.execute("UPDATE deliveries SET attempts = attempts + 1 WHERE status = 'delivering'")
    with op.batch_alter_table("partners", schema=None) as batch_op:
        batch_op.drop_column("circuit_cooldown")
        batch_op.drop_column("circuit_open_until")
        batch_op.drop_column("failing_since")
        batch_op.drop_column("consecutive_failures")
        batch_op.drop_column("max_in_flight")
