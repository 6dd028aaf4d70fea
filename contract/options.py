"""What a settings model's fields say beyond their type and description: the section each belongs
to and, where it is not `--field-name VALUE`, its command-line form.

Both are pydantic field metadata, written beside the type (`batch_size: Annotated[int, SAMPLING]`,
`nodes: Annotated[list[str], NODES, Flag(metavar=...)]`), so the model (`JobSpec`, `DaemonConfig`)
stays the one documented description of its settings, and its command line, help panels and docs
are derived from it (`graphtier.contract.command_line`, the wire conversions).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel


@dataclass(frozen=True)
class Section:
    """A group of related fields: one help panel of the command line, one table of the docs."""

    title: str


@dataclass(frozen=True)
class Flag:
    """A field's command-line form where it is not `--field-name VALUE` read as the field's type.

    `name`: the flag (default `--field-name`, a trailing `_s`, for seconds, left out; "" = no flag:
    the field is set in a file only). `parse`: the flag's text as field values, `{field: value}`
    (it may set the fields named in `sets` instead, which then have no flag of their own); it
    raises a GraphtierError naming the flag for a text it cannot read. `repeat`: a list given one
    item per flag (`--peer A --peer B`). `help`: the flag's own words, where its text form needs
    other words than the field's description.
    """

    name: str | None = None
    metavar: str | None = None
    help: str | None = None
    parse: Callable[[str], dict[str, Any]] | None = None
    sets: tuple[str, ...] = ()
    repeat: bool = False


FILE_ONLY = Flag(name="")  # a field with no flag: set in a config file only


def metadata_of(field: Any, kind: type) -> Any:
    """The `kind` (Section or Flag) in a pydantic field's metadata; None without one."""
    return next((item for item in field.metadata if isinstance(item, kind)), None)


def without_none(annotation: Any) -> tuple[Any, ...]:
    """The types of `annotation` other than None (`int | None` -> (int,))."""
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(arg for arg in get_args(annotation) if arg is not type(None))
    return (annotation,)


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field of this type nests (`BudgetSpec | None` -> BudgetSpec); None for another type."""
    for candidate in without_none(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
