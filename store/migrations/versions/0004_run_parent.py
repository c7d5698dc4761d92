"""runs.from_run and runs.from_kind: the run a run continues ("continue") or was forked from
("fork"). Null for every run before this revision.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("from_run", sa.String(64), nullable=True))
        batch.add_column(sa.Column("from_kind", sa.String(16), nullable=True))
    op.create_index("ix_runs_from_run", "runs", ["from_run"])


def downgrade() -> None:
    op.drop_index("ix_runs_from_run", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("from_kind")
        batch.drop_column("from_run")
