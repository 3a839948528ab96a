"""workload fingerprints, and objectives over several metrics

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('fingerprints',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('workload_name', sa.String(length=200), nullable=False),
    sa.Column('workload_fingerprint', sa.String(length=32), nullable=False),
    sa.Column('workload', sa.JSON(), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('ios', sa.Integer(), nullable=False),
    sa.Column('features', sa.JSON(), nullable=False),
    sa.Column('meta', sa.JSON(), server_default='{}', nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('fingerprints', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_fingerprints_workload_fingerprint'), ['workload_fingerprint'], unique=False)
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('objective', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('objective')
    with op.batch_alter_table('fingerprints', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_fingerprints_workload_fingerprint'))
    op.drop_table('fingerprints')
