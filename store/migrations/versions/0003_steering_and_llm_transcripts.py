"""steering_events (every pause, resume, stop, goal change and hint, with its time) and
attempts.llm_sha (the artifact holding the LLM's prompt and reply for the attempt).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "steering_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_steering_events_run_id", "steering_events", ["run_id"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("llm_sha", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("llm_sha")
    op.drop_index("ix_steering_events_run_id", table_name="steering_events")
    op.drop_table("steering_events")
