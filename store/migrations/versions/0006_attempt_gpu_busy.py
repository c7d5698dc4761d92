"""attempts.wall_s, wall_share_s, gpu_busy_s and timing_s: how each evaluation used the GPU (wall
seconds, its share of them when evaluations ran at once, busy GPU-seconds from NVML, exclusive
timing). Null for every attempt before this revision.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = ("wall_s", "wall_share_s", "gpu_busy_s", "timing_s")


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
