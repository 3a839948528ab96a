"""a campaign's hyperparameters as they were resolved when it was created

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('resolved_params', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('resolved_params')
