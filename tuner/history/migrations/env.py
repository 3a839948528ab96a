"""Alembic environment: runs on the connection that tuner.schema.upgrade_schema() hands over (in its
transaction, which holds the migration lock, so begin_transaction() below adds none), or on the URL
in STORETUNE_DATABASE_URL when run from the alembic command line."""

import os

from alembic import context
from sqlalchemy import create_engine

from storetune.tuner.history.models import Base

target_metadata = Base.metadata


def run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    with create_engine(os.environ["STORETUNE_DATABASE_URL"]).connect() as conn:
        run(conn)
