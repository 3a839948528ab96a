"""campaigns, trials and measurements

Revision ID: 0001
Revises: 
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('campaigns',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('space_name', sa.String(length=200), nullable=False),
    sa.Column('space_fingerprint', sa.String(length=32), nullable=False),
    sa.Column('space', sa.JSON(), nullable=False),
    sa.Column('runner', sa.String(length=32), nullable=False),
    sa.Column('runner_settings', sa.JSON(), nullable=False),
    sa.Column('workload_name', sa.String(length=200), nullable=False),
    sa.Column('workload_fingerprint', sa.String(length=32), nullable=False),
    sa.Column('workload', sa.JSON(), nullable=False),
    sa.Column('device', sa.String(length=200), nullable=False),
    sa.Column('algorithm', sa.String(length=32), nullable=False),
    sa.Column('algorithm_params', sa.JSON(), nullable=False),
    sa.Column('objective_metric', sa.String(length=100), nullable=False),
    sa.Column('objective_direction', sa.String(length=3), nullable=False),
    sa.Column('budget', sa.Integer(), nullable=False),
    sa.Column('seed', sa.BigInteger(), nullable=False),
    sa.Column('repeats', sa.Integer(), nullable=False),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('driver_host', sa.String(length=200), nullable=True),
    sa.Column('driver_pid', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_campaigns_space_fingerprint'), ['space_fingerprint'], unique=False)
        batch_op.create_index(batch_op.f('ix_campaigns_workload_fingerprint'), ['workload_fingerprint'], unique=False)

    op.create_table('trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('config_hash', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('seed', sa.BigInteger(), nullable=False),
    sa.Column('retry_of', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['retry_of'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'number')
    )
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.create_index('ix_trials_campaign_status', ['campaign_id', 'status'], unique=False)
        batch_op.create_index(batch_op.f('ix_trials_config_hash'), ['config_hash'], unique=False)

    op.create_table('measurements',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('env', sa.JSON(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_measurements_trial_id'), ['trial_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_measurements_trial_id'))

    op.drop_table('measurements')
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trials_config_hash'))
        batch_op.drop_index('ix_trials_campaign_status')

    op.drop_table('trials')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_campaigns_workload_fingerprint'))
        batch_op.drop_index(batch_op.f('ix_campaigns_space_fingerprint'))

    op.drop_table('campaigns')
