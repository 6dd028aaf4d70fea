"""MkDocs hook: a settings model's fields as tables, one per section, where a page asks for them.

A page line `<!-- fields: graphtier.contract.jobs.spec.JobSpec -->` becomes, for each section of the
model (`graphtier.contract.options.Section`), a table of its fields: the YAML key, the command-line
flag that sets it, the default and the description -- all read from the model, as `--help` is.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- fields: ([\w.]+) -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: _tables(match[1]), markdown)


def _tables(path: str) -> str:
    from graphtier.contract.command_line import model_options
    from graphtier.contract.options import Flag, metadata_of, nested_model

    module, _, name = path.rpartition(".")
    try:
        model = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"docs: no settings model {path}: {exc}") from None

    def field_at(keys: tuple[str, ...]) -> Any:
        owner = model
        for key in keys[:-1]:
            owner = nested_model(owner.model_fields[key].annotation)
        return owner.model_fields[keys[-1]]

    sections: dict[str, list[str]] = {}
    for option in model_options(model):
        flag = metadata_of(field_at(option.path), Flag)
        for keys in (option.path, *((*option.path[:-1], other) for other in (flag.sets if flag else ()))):
            field = field_at(keys)
            default = None if field.is_required() else field.get_default(call_default_factory=True)
            shown = "required" if field.is_required() else "" if default in (None, "", []) else f"`{default}`"
            description = (field.description or "").replace("|", "\\|")
            sections.setdefault(option.section, []).append(
                f"| `{'.'.join(keys)}` | `{option.flag}` | {shown} | {description} |"
            )
    return "\n".join(
        f"### {title}\n\n| key | flag | default | description |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
        for title, rows in sections.items()
    )
