"""the executor a campaign runs on, the node of each measurement, cancelling comparisons

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('executor', sa.JSON(), nullable=True))
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.add_column(sa.Column('node', sa.String(length=200), nullable=True))
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cancel_requested', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.drop_column('cancel_requested')
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_column('node')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('executor')
