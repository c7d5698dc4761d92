"""problems: each problem a CPU worker could load when it started (its public description, who
registered it, when), so the API lists and accepts problems from packages it need not have.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "problems",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("description", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(1000), nullable=False),
        sa.Column("worker", sa.String(300), nullable=False),
        sa.Column("workers", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("problems")
