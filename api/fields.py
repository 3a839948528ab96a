"""How an error names what the user set, in each front end's terms.

The layers below write a field of a request in backticks (```warm_start` similar needs a single `metric```):
readable as it is in a log or a campaign's note, and rendered here as the command line's option (``--warm-start``)
or as the JSON path of the request's field (``runner_settings.context``), which is also where the error lies.
Written by hand: a field's name is one word, and its place in each front end is known here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from storetune.runners import SETTINGS
from storetune.runners.settings import flag as settings_flag

NAMED = re.compile(r"`([a-z][a-z0-9_]*)`")
# a campaign's fields whose option or JSON field has another name
CLI_FLAGS = {"batch_size": "--parallel", "fixed": "--fix", "algorithm_params": "--param", "param": "--param"}
JSON_FIELDS = {"batch_size": "parallel", "fixed": "fix", "param": "algorithm_params"}


def _render(message: str, name: Callable[[str], str | None]) -> tuple[str, list[str]]:
    named: list[str] = []

    def one(match: re.Match[str]) -> str:
        said = name(match[1])
        if said is None:
            return match[0]
        named.append(match[1])
        return said

    return NAMED.sub(one, message), named


def cli_terms(message: str) -> str:
    """The message with each field named by its option, as the command line takes it."""
    def flag(field: str) -> str | None:
        if field in CLI_FLAGS:
            return CLI_FLAGS[field]
        for model in SETTINGS.values():
            if field in model.model_fields:
                return settings_flag(model, field)
        return "--" + field.replace("_", "-")

    return _render(message, flag)[0]


def json_terms(message: str, body: Iterable[str], runner_settings: bool = True) -> tuple[str, tuple[str, ...]]:
    """The message with each field named by its JSON path in a request whose fields are ``body`` (a runner's
    settings under ``runner_settings`` when ``runner_settings``), and the path of the first one named: where
    the error lies (empty if none)."""
    body = set(body)
    paths: dict[str, tuple[str, ...]] = {}

    def path(field: str) -> str | None:
        key = JSON_FIELDS.get(field, field)
        if key in body:
            paths[field] = (key,)
        elif runner_settings and any(field in model.model_fields for model in SETTINGS.values()):
            paths[field] = ("runner_settings", field)
        else:
            return None
        return ".".join(paths[field])

    text, named = _render(message, path)
    return text, paths[named[0]] if named else ()


def plain(message: str) -> str:
    """The message with each field named by its own name (a query parameter, a field at the body's top)."""
    return NAMED.sub(lambda m: JSON_FIELDS.get(m[1], m[1]), message)
