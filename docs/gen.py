"""Markdown generated from the code, for the cog blocks of docs/commands.md, docs/configuration.md and
docs/architecture.md.

``cog -r docs/*.md`` rewrites the blocks; ``cog --check`` (in ``.ci/run``) fails
when they are stale. The output depends only on the code: the command tree and the settings classes are read
directly, never through a help formatter, so the terminal's width changes nothing.
"""

from __future__ import annotations

import ast
import enum
import json
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import NoDecode

from finops.cli import app, base
from finops.settings.combined import GROUPS
from finops.settings.group import SettingsGroup, secret_file_fields

PROGRAM = "gpu-finops"
REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("collector", "finops", "alerts", "dashboards")
"""The Python packages of the project, in the order the module map lists them."""

TITLES = {
    "ApiSettings": "API tokens",
    "TlsSettings": "TLS",
    "IdleSettings": "Idle detection",
    "WasteSettings": "Waste reasons",
    "SchedulerSettings": "Scheduler",
    "PrometheusPullSettings": "Prometheus pull",
    "SacctSettings": "Slurm import (sacct)",
    "CollectorSettings": "Collectors",
    "DemoSettings": "Demo data",
    "AlertSettings": "Alerts",
    "NudgeSettings": "Nudges",
    "DashboardSettings": "Dashboard log-in (OpenID Connect)",
}
"""Section titles of the settings groups whose class name does not read well as one."""


# --- commands ---------------------------------------------------------------------------------------------------


def command_tree() -> list[tuple[list[str], Any]]:
    """Every command and group of the CLI as (path, click command), depth first, subcommands by name."""
    return [(path, command) for path, command in base.command_tree(typer.main.get_command(app), [PROGRAM])]


def _is_group(command: Any) -> bool:
    return hasattr(command, "commands")


def commands_summary() -> str:
    """A row per command: its name (linked to its section), arguments and options, and its help's first paragraph."""
    lines = ["| command | arguments and options | what it does |", "|---|---|---|"]
    for path, command in command_tree()[1:]:
        if _is_group(command) or command.hidden:
            continue
        name = " ".join(path)
        params = " ".join(f"`{_synopsis(p)}`" for p in command.params if not p.hidden)
        lines.append(f"| [`{name}`](#{_anchor(name)}) | {params} | {_cell(base.help_paragraphs(command.help)[:1])} |")
    return "\n".join(lines) + "\n"


def commands_reference() -> str:
    """A section per command and group: usage, the whole help text, and a table of its arguments and options."""
    out: list[str] = []
    for path, command in command_tree():
        if command.hidden:
            continue
        name = " ".join(path)
        params = [p for p in command.params if not p.hidden]
        usage = [name, *(["[OPTIONS]"] if params else []), *(["COMMAND [ARGS]..."] if _is_group(command) else [])]
        usage += [_usage(p) for p in params if _kind(p) == "argument"]
        out += [f"### `{name}`", "", "```", " ".join(usage), "```", ""]
        for paragraph in base.help_paragraphs(command.help):
            out += [_inline(paragraph), ""]
        if _is_group(command):
            subcommands = ", ".join(f"[`{sub}`](#{_anchor(f'{name} {sub}')})" for sub in sorted(command.commands))
            out += [f"Subcommands: {subcommands}.", ""]
        if params:
            out += ["| argument or option | type | default | help |", "|---|---|---|---|"]
            out += [_param_row(p) for p in params]
            out.append("")
    return "\n".join(out)


def _kind(param: Any) -> str:
    return "option" if param.opts and param.opts[0].startswith("-") else "argument"


def _synopsis(param: Any) -> str:
    """An argument as in the usage line; an option by its longest name."""
    return _usage(param) if _kind(param) == "argument" else max(param.opts, key=len)


def _usage(param: Any) -> str:
    text = param.name.upper() + ("..." if param.nargs == -1 or param.multiple else "")
    return text if param.required else f"[{text}]"


def _param_row(param: Any) -> str:
    if _kind(param) == "argument":
        name = f"`{_usage(param)}`"
    else:
        name = " / ".join(f"`{opt}`" for opt in [*sorted(param.opts, key=len, reverse=True), *param.secondary_opts])
    help_text = _inline(" ".join(base.help_paragraphs(param.help)))
    if param.envvar:
        envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
        help_text += (" " if help_text else "") + "Environment: " + ", ".join(f"`{e}`" for e in envvars) + "."
    return f"| {name} | {_param_type(param)} | {_param_default(param)} | {_escape_pipes(help_text)} |"


_TYPE_NAMES = {"str": "text", "int": "integer", "float": "number", "bool": "flag", "Path": "path"}


def _param_type(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is not None:
        args = typing.get_args(annotation)
        base = args[0] if typing.get_origin(annotation) is list and args else annotation
        name = getattr(base, "__name__", str(base))
    else:
        name = str(getattr(getattr(param, "type", None), "name", "text"))
    name = _TYPE_NAMES.get(name, name.lower())
    if param.multiple:
        return f"{name}, repeatable"
    if param.nargs == -1:
        return f"{name}, any number"
    return name


def _param_default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        return ""
    if default is None or default == "" or default == [] or callable(default):
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{item}`" for item in default)
    return f"`{default}`"


# --- configuration ----------------------------------------------------------------------------------------------


def settings_tables() -> str:
    """A section per settings group: its purpose, then a row per variable (name, type, default, description)."""
    out: list[str] = []
    for group in GROUPS:
        out += [
            f"## {_title(group)}",
            "",
            f"{_inline(_docstring(group))} Class `{group.__module__}.{group.__name__}`.",
            "",
        ]
        out += ["| variable | type | default | description |", "|---|---|---|---|"]
        files = secret_file_fields(group)
        for name, field in group.model_fields.items():
            description = _inline(field.description or "")
            if name in files:
                description += f" Instead of `{_env(files[name])}`, not with it."
            out.append(
                f"| `{_env(name)}` | {_setting_type(field)} | {_setting_default(field)} | "
                f"{_escape_pipes(description)} |"
            )
        out.append("")
    return "\n".join(out)


def command_environment() -> str:
    """A row per command-line option that also reads an environment variable (these are not settings)."""
    lines = ["| variable | option |", "|---|---|"]
    for path, command in command_tree():
        for param in command.params:
            envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
            for envvar in envvars:
                option = " ".join(path) + " " + param.opts[0]
                lines.append(f"| `{envvar}` | [`{option}`](commands.md#{_anchor(' '.join(path))}) |")
    return "\n".join(lines) + "\n"


def settings_variables() -> list[str]:
    """Every environment variable the settings read, group by group."""
    return [_env(name) for group in GROUPS for name in group.model_fields]


def _env(name: str) -> str:
    return f"FINOPS_{name.upper()}"


def _title(group: type[SettingsGroup]) -> str:
    """The section title of a settings group: :data:`TITLES`, else its class name in words."""
    name = group.__name__
    return TITLES.get(name) or re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name.removesuffix("Settings"))


def _docstring(group: type[SettingsGroup]) -> str:
    return " ".join((group.__doc__ or "").split())


def _comma_list(field: FieldInfo) -> bool:
    """A list setting read as comma-separated text from the environment (marked ``NoDecode``), not as JSON."""
    return typing.get_origin(field.annotation) is list and NoDecode in field.metadata


def _setting_type(field: FieldInfo) -> str:
    if _comma_list(field):
        text = f"comma-separated {_type_text(typing.get_args(field.annotation)[0])}"
    else:
        text = _type_text(field.annotation)
    bounds = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    limits = [f"{sign} {getattr(m, key)}" for m in field.metadata for key, sign in bounds.items() if hasattr(m, key)]
    return f"{text} ({', '.join(limits)})" if limits else text


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if args and type(None) in args:
        return _type_text(next(a for a in args if a is not type(None)))
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{member.value}`" for member in annotation)
    if origin is dict:
        return f"JSON object of {_type_text(args[0])} → {_type_text(args[1])}"
    if origin is list:
        return f"JSON list of {_type_text(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object of " + ", ".join(f"`{name}`" for name in annotation.model_fields)
    names = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}
    if annotation in names:
        return names[annotation]
    return "secret" if getattr(annotation, "__name__", "") == "SecretStr" else str(annotation)


def _setting_default(field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "—"
    if default == "" or (default == [] and _comma_list(field)):
        return "empty"
    if _comma_list(field):
        return f"`{', '.join(default)}`"
    if isinstance(default, enum.Enum):
        return f"`{default.value}`"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, (list, dict)):
        return f"`{json.dumps(default)}`"
    return f"`{default}`"


# --- Markdown ---------------------------------------------------------------------------------------------------


# --- architecture ---------------------------------------------------------------------------------------------


def module_map() -> str:
    """One table per package (``collector``, ``finops``, ``alerts``, ``dashboards``): every module and subpackage
    with the first sentence of its docstring, read from the source files (nothing is imported)."""
    out = []
    for package in PACKAGES:
        rows = []
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            parts = relative.with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if parts[-1] == "__main__":
                continue
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            rows.append((name, str(relative), _first_sentence(doc)))
        out.append(f"### `{package}`\n\n| module | what it owns |\n|---|---|")
        out.extend(f"| [`{name}`](../{relative}) | {_escape_pipes(_inline(text))} |" for name, relative, text in rows)
        out.append("")
    return "\n".join(out)


def import_contracts() -> str:
    """The import-linter contracts of ``pyproject.toml``, each as a heading and what it states."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    out = []
    for contract in config["contracts"]:
        out.append(f"- **{contract['name']}** (`{contract['type']}`)")
        if contract["type"] == "forbidden":
            sources = ", ".join(f"`{m}`" for m in contract["source_modules"])
            forbidden = ", ".join(f"`{m}`" for m in contract["forbidden_modules"])
            out.append(f"  - {sources} may not import {forbidden}, directly or through another module.")
        elif contract["type"] == "layers":
            out.append(
                "  - from the top; a layer imports only the layers below it, `|` separates independent siblings:"
            )
            for number, layer in enumerate(contract["layers"], start=1):
                siblings = [f"`{module.strip()}`" for module in layer.split("|")]
                out.append(f"  {number}. " + " \\| ".join(siblings))
        elif contract["type"] == "acyclic_siblings":
            ancestors = ", ".join(f"`{m}`" for m in contract["ancestors"])
            out.append(
                f"  - inside {ancestors}: no two modules or subpackages of one package import each other in a cycle."
            )
    return "\n".join(out) + "\n"


def _first_sentence(doc: str) -> str:
    """The docstring's first sentence: its first paragraph up to the first full stop followed by a space or the end."""
    paragraph = " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
    match = re.search(r"^(.+?\.)(\s|$)", paragraph)
    return (match.group(1) if match else paragraph).rstrip(":")


def _inline(text: str) -> str:
    """Plain help text as Markdown: code spans kept, emphasis characters and angle brackets escaped."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        part = parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", part)
    return "".join(parts)


def _cell(paragraphs: list[str]) -> str:
    return _escape_pipes(_inline(" ".join(paragraphs)))


def _escape_pipes(text: str) -> str:
    return text.replace("|", "\\|")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
