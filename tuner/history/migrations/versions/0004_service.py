"""campaigns and comparisons the service runs: who launched them, a cancel request, a note;
the index that finds a campaign's best trial

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('origin', sa.String(length=16), server_default='cli', nullable=False))
        batch_op.add_column(sa.Column('cancel_requested', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.create_index('ix_campaigns_origin_state', ['origin', 'state'])
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('origin', sa.String(length=16), server_default='cli', nullable=False))
        batch_op.add_column(sa.Column('note', sa.Text(), nullable=True))
    # the best trial of a campaign is the first row of this index, not a sort of its trials
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index('ix_trials_campaign_status')
        batch_op.create_index('ix_trials_campaign_status_value', ['campaign_id', 'status', 'value'])


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index('ix_trials_campaign_status_value')
        batch_op.create_index('ix_trials_campaign_status', ['campaign_id', 'status'])
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.drop_column('note')
        batch_op.drop_column('origin')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_index('ix_campaigns_origin_state')
        batch_op.drop_column('cancel_requested')
        batch_op.drop_column('origin')
