"""The one SQL history (``store.History``, whose comparisons' part is ``comparisons``), its tables
(``models``) and schema (``schema``, Alembic's ``migrations``), the frozen views it hands out (``views``), and the
in-memory store that gives the same views (``memory``)."""
