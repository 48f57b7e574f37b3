"""indexes for the operator console's keyset pages and time-range summaries

Revision ID: 0010
Revises: 0008
Create Date: 2026-11-24 20:40:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# (name, table, columns): each console listing pages newest first by (created_at, id), filtered
# or not; the partner page counts one partner's attempts over the last day.
INDEXES = (
    ("ix_registrations_created_id", "registrations", ["created_at", "id"]),
    ("ix_registrations_intent_created", "registrations", ["intent", "created_at", "id"]),
    ("ix_deliveries_created", "deliveries", ["created_at", "id"]),
    ("ix_deliveries_partner_created", "deliveries", ["partner_id", "created_at", "id"]),
    ("ix_delivery_attempts_partner_started", "delivery_attempts", ["partner_id", "started_at"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns, unique=False)


def downgrade() -> None:
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
