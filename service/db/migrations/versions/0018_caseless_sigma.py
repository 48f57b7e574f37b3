"""registrations keyed with a final sigma as any other sigma (``emails.caseless``)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 10:45:00.000000

An address's key was its local part lower-cased, and Python's ``lower`` writes a capital sigma at a
word's end as a final sigma: the capitals of a Greek local part keyed apart from its small letters,
so they made a second registration and escaped the erasure of the first. Only keys holding a final
sigma change; rows whose new keys coincide for one intent are one registration
(``service.db.rekey``). The downgrade leaves keys as they are (each is still unique).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.db.registrations import email_key
from service.db.rekey import REGISTRATIONS, rekey_registrations

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_FINAL_SIGMA = "\u03c2"


# Keys looked up in one statement at most: a driver takes a bounded number of parameters
# (asyncpg 32,767), and a table may hold more keys to look up.
_KEYS_A_STATEMENT = 1000


def upgrade() -> None:
    bind = op.get_bind()
    table = REGISTRATIONS
    holding = table.c.email_key.contains(_FINAL_SIGMA, autoescape=True)
    rows = {row.id: row for row in bind.execute(sa.select(table).where(holding))}
    if not rows:
        return
    # With them, every row already holding one of their new keys: the rows they merge with.
    keys = sorted({email_key(row.email) for row in rows.values()})
    for start in range(0, len(keys), _KEYS_A_STATEMENT):
        chunk = keys[start : start + _KEYS_A_STATEMENT]
        rows.update((row.id, row) for row in bind.execute(sa.select(table).where(table.c.email_key.in_(chunk))))
    rekey_registrations(bind, list(rows.values()))


def downgrade() -> None:
    pass
