"""each campaign's multi-fidelity schedule (ASHA's rungs and eta) and device-seconds budget

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fidelity', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('fidelity')
