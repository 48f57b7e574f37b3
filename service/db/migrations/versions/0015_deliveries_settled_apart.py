"""partial indexes on failed and cancelled deliveries in creation order, for the console's filters

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 23:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The console lists deliveries newest first, filtered by status. Failed and cancelled rows are few
# beside the delivered history, and without these the filter walked ix_deliveries_created past
# every other row (SQLite, 200,000 deliveries: 133 ms against 2-4 ms unfiltered). A row enters
# each index only when it reaches that status, so delivery's own writes never touch them.
INDEXES = (
    ("ix_deliveries_failed_created", "failed"),
    ("ix_deliveries_cancelled_created", "cancelled"),
)


def upgrade() -> None:
    for name, status in INDEXES:
        where = sa.text(f"status = '{status}'")
        op.create_index(
            name, "deliveries", ["created_at", "id"], unique=False, sqlite_where=where, postgresql_where=where
        )


def downgrade() -> None:
    for name, _ in reversed(INDEXES):
        op.drop_index(name, table_name="deliveries")
