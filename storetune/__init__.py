"""StoreTune: a black-box auto-tuner for storage stacks.

One namespace for its layers, each a folder of the repository: ``storetune.search_spaces`` (what can be tuned),
``storetune.runners`` (how to measure), ``storetune.tuner`` (how to choose, and the history) and
``storetune.api`` (the command line and the REST service). Importing this package loads none of them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("storetune")
except PackageNotFoundError:  # a checkout that was not installed
    __version__ = "0+unknown"
