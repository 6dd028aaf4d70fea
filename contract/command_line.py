"""A settings model's command line, derived from the model: one typer option per field, with its
name, type, choices (a Literal's), default, help (the field's description) and help panel (its
section); a nested model's fields are options of their own (`--host-budget` sets `budgets.host`).

`with_model_options(Model)` adds the options to a typer command, which then receives the ones the
command line gave as a `GivenOptions`: `.values()` reads them as the model's field values (each
flag by its form, `graphtier.contract.options.Flag`), for the model to validate, so a field is
written once -- in the model -- and `graphtier job submit` and `graphtierd` follow it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typer.core import TyperCommand, TyperGroup

from graphtier.contract.options import Flag, Section, metadata_of, nested_model, without_none

SCALARS = (bool, int, float, str, Path)  # what a flag's text is read as
_CONTEXT = "command_line_context_"  # the parameter typer passes its context in
_MARKUP = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")  # a rich markup tag, as `rich.markup.escape` finds them

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class ModelOption:
    """One option of a model's command line: the field it sets and how its text reads."""

    path: tuple[str, ...]  # the field's name, after its parent's for a nested model's field
    flag: str
    kind: type  # what typer reads the text as: one of SCALARS
    help: str
    section: str
    metavar: str | None
    choices: tuple[str, ...]  # a Literal field's values: named in the help, offered by shell completion
    default: Any  # the model's default, shown in the help; None = not shown
    parse: Callable[[str], dict[str, Any]] | None
    repeat: bool

    @property
    def param(self) -> str:
        """The command function's parameter that receives the option."""
        return "_".join(self.path)

    def typer_parameter(self) -> inspect.Parameter:
        item: Any = self.kind
        kind: Any = list[item] if self.repeat else item
        choices = self.choices
        option = typer.Option(
            self.flag,
            help=_escaped(self.help),
            metavar="" if self.kind is bool else _metavar(self.metavar, choices),
            rich_help_panel=self.section,
            show_default=self.default is not None,
            autocompletion=(lambda: list(choices)) if choices else None,
        )
        return inspect.Parameter(
            self.param, inspect.Parameter.KEYWORD_ONLY, default=self.default, annotation=Annotated[kind | None, option]
        )


def _metavar(declared: str | None, choices: tuple[str, ...]) -> str | None:
    """What the value looks like, as typer shows a type (`<int>`): a Flag's metavar, `<choice>` for a Literal's
    value (the help names them), else None (the type)."""
    if declared:
        return f"<{declared.lower()}>"
    return "<choice>" if choices else None


def model_options(model: type[BaseModel]) -> list[ModelOption]:
    """Every option of `model`'s command line, in field order; TypeError naming a field that has
    no command-line form (a type no flag reads, no section)."""
    return list(_options(model, (), None))


def _options(model: type[BaseModel], parent: tuple[str, ...], section: Section | None) -> Iterator[ModelOption]:
    fields = model.model_fields
    set_by_others = {name for field in fields.values() for name in getattr(metadata_of(field, Flag), "sets", ())}
    for name, field in fields.items():
        flag: Flag = metadata_of(field, Flag) or Flag()
        where = f"{model.__name__}.{name}"
        if flag.name == "" or name in set_by_others:
            continue
        own = metadata_of(field, Section) or section
        if own is None:
            raise TypeError(f"{where} names no Section (graphtier.contract.options): its help panel")
        nested = nested_model(field.annotation)
        if nested is not None and flag.parse is None:
            yield from _options(nested, (*parent, name), own)
            continue
        kind, choices = (str, ()) if flag.parse else _kind(field.annotation, repeat=flag.repeat, where=where)
        yield ModelOption(
            path=(*parent, name),
            flag=flag.name or "--" + name.removesuffix("_s").replace("_", "-"),
            kind=kind,
            help=_naming(flag.help or field.description or "", choices),
            section=own.title,
            metavar=flag.metavar,
            choices=choices,
            default=None if flag.parse or kind is bool else _shown_default(field),
            parse=flag.parse,
            repeat=flag.repeat,
        )


def _kind(annotation: Any, *, repeat: bool, where: str) -> tuple[type, tuple[str, ...]]:
    """What a flag's text is read as, and a Literal's choices; TypeError when no flag reads the type."""
    parts = without_none(annotation)
    inner = parts[0] if len(parts) == 1 else annotation
    if repeat and get_origin(inner) is list:
        (inner,) = get_args(inner)
    if get_origin(inner) is Literal:
        return str, tuple(str(value) for value in get_args(inner))
    if inner in SCALARS:
        return inner, ()
    raise TypeError(f"{where}: no flag reads a {annotation}; give it a Flag(parse=...) (graphtier.contract.options)")


def _naming(text: str, choices: tuple[str, ...]) -> str:
    """`text`, which names every one of `choices` (in its own words, or in a list at its end)."""
    unnamed = [choice for choice in choices if not re.search(rf"(?<![\w+-]){re.escape(choice)}(?![\w+-])", text)]
    return f"{text} One of: {', '.join(choices)}." if unnamed else text


def _shown_default(field: FieldInfo) -> Any:
    default = field.default
    return None if default is PydanticUndefined or default in ("", None) or isinstance(default, list) else default


def _escaped(text: str) -> str:
    """`text` as rich markup that shows it as written (typer renders help as markup)."""
    return _MARKUP.sub(lambda match: f"{match[1]}{match[1]}\\{match[2]}", text)


@dataclass(frozen=True)
class GivenOptions:
    """The options of a model that a command line gave, with what each was given."""

    given: tuple[tuple[ModelOption, Any], ...]

    def values(self) -> dict[str, Any]:
        """The given options as the model's field values: each flag's text read by its form, a nested
        model's fields as one partial mapping under its field; a flag's form may raise GraphtierError."""
        values: dict[str, Any] = {}
        for option, value in self.given:
            target = values
            for part in option.path[:-1]:
                target = target.setdefault(part, {})
            target.update(option.parse(value) if option.parse else {option.path[-1]: value})
        return values


def with_model_options(model: type[BaseModel], *, into: str = "given") -> Callable[[Command], Command]:
    """A typer command with `model`'s options besides its own: the command's parameter `into` receives
    a `GivenOptions` of those the command line gave (a default, not given, is left to the model)."""
    options = model_options(model)

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = [param for name, param in signature.parameters.items() if name != into]
        clash = {option.param for option in options} & {param.name for param in own}
        if clash:
            raise TypeError(f"{command.__name__}: parameters {sorted(clash)} are also options of {model.__name__}")
        context = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

        def run(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop(_CONTEXT)
            values = [(option, kwargs.pop(option.param)) for option in options]
            given = tuple((option, value) for option, value in values if _from_command_line(ctx, option.param))
            return command(**kwargs, **{into: GivenOptions(given)})

        parameters = [*own, context, *(option.typer_parameter() for option in options)]
        vars(run)["__signature__"] = signature.replace(parameters=parameters)  # what typer reads the options from
        run.__name__, run.__qualname__, run.__doc__ = command.__name__, command.__qualname__, command.__doc__
        run.__module__ = command.__module__
        return cast(Command, run)

    return decorate


def _from_command_line(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def flags_without_metavar(params: list[Any]) -> list[Any]:
    """`params` with no `<bool>` shown beside a flag in the help: a flag takes no value."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class FlagCommand(TyperCommand):
    """A typer command whose help shows no `<bool>` beside a flag: a flag takes no value."""

    def get_params(self, ctx: Any) -> list[Any]:
        return flags_without_metavar(super().get_params(ctx))


class FlagGroup(TyperGroup):
    """A typer group whose own options (`--version`, `--install-completion`) show no `<bool>` either."""

    def get_params(self, ctx: Any) -> list[Any]:
        return flags_without_metavar(super().get_params(ctx))


class FlagTyper(typer.Typer):
    """A typer application whose commands are FlagCommands and whose group is a FlagGroup, unless
    told otherwise: every command's help shows flags without a metavar."""

    def __init__(self, *args: Any, cls: type[TyperGroup] | None = FlagGroup, **kwargs: Any) -> None:
        super().__init__(*args, cls=cls, **kwargs)

    def command(self, *args: Any, cls: type[TyperCommand] | None = FlagCommand, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls, **kwargs)
