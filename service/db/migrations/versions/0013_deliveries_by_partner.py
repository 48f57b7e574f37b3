"""SQLite: deliveries stored in partner order (WITHOUT ROWID, keyed by partner_id, id)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 17:45:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite keeps a rowid table's rows in insertion order, so one event's deliveries to every
    # partner sit side by side, and a claim or settle of 512 of one partner's rows beside ten other
    # partners' backlogs dirtied eleven times the pages it would alone. Keyed by (partner_id, id),
    # a partner's rows are stored together (docs/architecture.md "Storage"). PostgreSQL's heap
    # keeps no such order; nothing changes there.
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "deliveries", recreate="always", table_kwargs={"sqlite_with_rowid": False}
    ) as batch:
        batch.drop_constraint("pk_deliveries", type_="primary")
        batch.create_primary_key("pk_deliveries", ["partner_id", "id"])
        # Lookups by id, and the parent key of delivery_attempts.delivery_id.
        batch.create_index("ux_deliveries_id", ["id"], unique=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("deliveries", recreate="always") as batch:
        batch.drop_index("ux_deliveries_id")
        batch.drop_constraint("pk_deliveries", type_="primary")
        batch.create_primary_key("pk_deliveries", ["id"])
