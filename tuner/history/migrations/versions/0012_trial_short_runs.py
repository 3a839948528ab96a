"""each trial's runs stopped at a rung (multi-fidelity search), so that the most-measured rule counts whole runs

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('short_runs', sa.Integer(), server_default='0', nullable=False))
    # a trial recorded before: its STOPPED measurements, counted once
    op.execute("UPDATE trials SET short_runs = (SELECT COUNT(*) FROM measurements "
               "WHERE measurements.trial_id = trials.id AND measurements.status = 'STOPPED')")


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('short_runs')
