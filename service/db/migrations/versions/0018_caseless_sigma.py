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


def upgrade() -> None:
    bind = op.get_bind()
    table = REGISTRATIONS
    holding = table.c.email_key.contains(_FINAL_SIGMA, autoescape=True)
    emails = bind.execute(sa.select(table.c.email).where(holding)).scalars().all()
    if not emails:
        return
    keys = sorted({email_key(email) for email in emails})
    rekey_registrations(bind, sa.or_(holding, table.c.email_key.in_(keys)))


def downgrade() -> None:
    pass
