"""How people drive StoreTune: the ``storetune`` command line (and, later, the REST service)."""
