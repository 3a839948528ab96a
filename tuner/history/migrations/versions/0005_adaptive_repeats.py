"""adaptive repeats: a campaign's cap on re-measurements, and each trial's number of runs

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_repeats', sa.Integer(), nullable=True))
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('runs', sa.Integer(), server_default='0', nullable=False))
    # every trial so far was measured once per recorded repeat
    op.execute("UPDATE trials SET runs = (SELECT count(*) FROM measurements WHERE measurements.trial_id = trials.id)")


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('runs')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('max_repeats')
