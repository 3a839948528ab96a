"""The command line (``storetune``): ``main`` holds the typer application; each module beside it a family of
commands. It drives the service only through its entry point (``storetune serve``), never by importing it."""
