"""index on events.created_at for the sitemap's room scan

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 15:10:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # sitemap.xml reads the newest event's created_at and then only the events stored since its
    # last reading: with this index both are a short index range, not a scan of every event.
    op.create_index("ix_events_created_at", "events", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_events_created_at", table_name="events")
