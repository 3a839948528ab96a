"""The reference pages, generated from the code at every `mkdocs build` (mkdocs-gen-files runs this), so they
cannot drift from it: the CLI (typer), the REST API (FastAPI's OpenAPI document, rendered to Markdown by
neoteroi-mkdocs' openapidocs), each algorithm's hyperparameters and each runner's settings (their pydantic
models' JSON schemas), and the search spaces (the YAML files, with the man page each domain comes from)."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

import mkdocs_gen_files


def cli() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from storetune.api.cli.main import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    text = get_docs_for_click(obj=command, ctx=ctx, name="storetune", title="Command line")
    return ("<!-- generated from the typer app by docs/gen_ref.py: edit the code's help texts, not this page -->\n"
            + text.replace("\n# ", "\n## ", ).replace("\n## `storetune`", "\n# `storetune`", 1))


def rest() -> str:
    from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler

    from storetune.api.service.app import create_app
    from storetune.api.settings import Settings

    # the document only: no history is opened (that happens when the app starts)
    spec = create_app(Settings(database_url="sqlite://")).openapi()
    body = OpenAPIV3DocumentationHandler(json.loads(json.dumps(spec)), style="MKDOCS").write()
    return ("# REST API\n\n<!-- generated from the service's OpenAPI document by docs/gen_ref.py -->\n"
            "The service serves the same document at `/openapi.json` and an interactive page at `/docs`. "
            "Every call that changes something takes the bearer token `STORETUNE_TOKEN` when the server has one.\n\n"
            + body.replace("\n# ", "\n## "))


def _cell(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def _domain(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return ", ".join(f"`{v}`" for v in schema["enum"])
    for option in schema.get("anyOf", ()):
        if "enum" in option:
            return _domain(option)
    bounds = [f"≥ {schema['minimum']}" if "minimum" in schema else "",
              f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"≤ {schema['maximum']}" if "maximum" in schema else "",
              f"< {schema['exclusiveMaximum']}" if "exclusiveMaximum" in schema else ""]
    kind = schema.get("type") or "/".join(o.get("type", "?") for o in schema.get("anyOf", ()))
    return " ".join(b for b in [kind, *bounds] if b)


def _fields(schema: dict[str, Any]) -> list[str]:
    rows = ["| name | default | domain | what it does |", "|---|---|---|---|"]
    for name, field in schema.get("properties", {}).items():
        default = f"`{_cell(field['default'])}`" if "default" in field else "required"
        rows.append(f"| `{name}` | {default} | {_cell(_domain(field))} | {_cell(field.get('description', ''))} |")
    return rows


def algorithms() -> str:
    from storetune.tuner import ALGORITHMS, SEARCH_ALGORITHMS
    from storetune.tuner.algorithms.base import params_schema
    from storetune.tuner.algorithms.registry import DEFAULT_ALGORITHM, DEFAULT_PARETO_ALGORITHM, algorithm_class

    out = ["# Algorithms", "",
           "<!-- generated from each algorithm's pydantic Params model by docs/gen_ref.py -->",
           f"`--algorithm` (REST: `algorithm`) picks one; `{DEFAULT_ALGORITHM}` is the default for one objective and "
           f"`{DEFAULT_PARETO_ALGORITHM}` for several. Set a hyperparameter with `--param name=value` (REST: "
           "`algorithm_params`). `GET /algorithms` serves the same schemas.", ""]
    for name in ALGORITHMS:
        cls = algorithm_class(name)
        own = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__ or ""
        kind = "single objective" if name in SEARCH_ALGORITHMS else "several objectives (Pareto)"
        out += [f"## `{name}`", "", f"*{kind}* · `{cls.__module__}.{cls.__name__}`", "",
                inspect.cleandoc(own).split("\n\n")[0], "", *_fields(params_schema(cls.Params)), ""]
    return "\n".join(out)


def runners() -> str:
    from storetune.runners import SETTINGS

    out = ["# Runners", "", "<!-- generated from each runner's settings model by docs/gen_ref.py -->",
           "A runner measures one configuration. `--runner` (REST: `runner`) picks one; its settings are the "
           "options below (CLI: the flag of the same name, with `-` for `_`; REST: `runner_settings`). "
           "`GET /runners` serves the same schemas.", ""]
    for name, model in SETTINGS.items():
        out += [f"## `{name}`", "", inspect.getdoc(model) or "", "", *_fields(model.model_json_schema()), ""]
    return "\n".join(out)


def spaces() -> str:
    from storetune.search_spaces import list_spaces, load_space

    out = ["# Search spaces", "", "<!-- generated from search_spaces/*.yaml by docs/gen_ref.py -->",
           "The named spaces a device or admission campaign searches (`--space`); a table's space is read from "
           "the table. Each domain is what the tool accepts and the kernel mounts; *source* names the man page "
           "it comes from.", ""]
    for name in list_spaces():
        space = load_space(name)
        n = space.cardinality() if space.finite else None
        size = "continuous" if n is None else f"{n:,} configurations" if n < 10**9 else f"about {n:.1e} configurations"
        out += [f"## `{name}`", "", f"{space.description} ({len(space.parameters)} parameters, {size}).", "",
                "| parameter | domain | default | when | what it is | source |", "|---|---|---|---|---|---|"]
        for p in space.to_dict()["parameters"]:
            domain = ", ".join(map(str, p["values"])) if "values" in p else f"[{p['low']}, {p['high']}]" + (
                " log" if p.get("log") else "")
            unit = f" {p['unit']}" if p.get("unit") else ""
            when = _cell(p["when"]) if "when" in p else ""
            out.append(f"| `{p['name']}` | {_cell(domain)}{unit} | `{p['default']}` | {when} | "
                       f"{_cell(p.get('doc', ''))} | {_cell(p.get('source', ''))} |")
        forbidden = space.to_dict()["forbidden"]
        if forbidden:
            out += ["", "Forbidden combinations:", ""]
            out += [f"- `{_cell(f['when'])}`: {f['reason']}" for f in forbidden]
        out.append("")
    return "\n".join(out)


PAGES = {"reference/cli.md": cli, "reference/rest.md": rest, "reference/algorithms.md": algorithms,
         "reference/runners.md": runners, "reference/spaces.md": spaces}

for path, make in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(make())
