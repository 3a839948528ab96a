"""each measurement's per-interval series (fio's per-second logs) and its steady state

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.add_column(sa.Column('series', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_column('series')
