"""comparisons, and each campaign's warm start

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('comparisons',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('workload_name', sa.String(length=200), nullable=False),
    sa.Column('runner_settings', sa.JSON(), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('results', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('warm_start', sa.String(length=16), server_default='none', nullable=False))
        batch_op.add_column(sa.Column('comparison_id', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_campaigns_comparison_id'), ['comparison_id'], unique=False)
        batch_op.create_foreign_key('fk_campaigns_comparison_id', 'comparisons', ['comparison_id'], ['id'], ondelete='CASCADE')


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_constraint('fk_campaigns_comparison_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_campaigns_comparison_id'))
        batch_op.drop_column('comparison_id')
        batch_op.drop_column('warm_start')

    op.drop_table('comparisons')
