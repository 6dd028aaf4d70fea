"""`graphtierd --help` and its usage errors in the style of the `graphtier` CLI.

The daemon parses its flags with argparse (nothing beyond the standard library is imported before
the instance lock is taken); `HelpStyledParser` only changes how help and usage errors look: rich
panels laid out as typer lays out the `graphtier` commands' (option in cyan, `<type>` in yellow,
errors in a red panel), so the two programs present their options alike. rich is imported only
when help or an error is shown; help texts are printed as written, never read as markup.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import IO, NoReturn

_TYPE_NAMES = {Path: "path", int: "int", float: "float", str: "str"}


class HelpStyledParser(argparse.ArgumentParser):
    """An ArgumentParser whose --help and usage errors look like the graphtier CLI's."""

    def _usage_line(self):  # -> rich.text.Text
        from rich.text import Text

        return Text.assemble(("Usage: ", "yellow"), (f"{self.prog} [OPTIONS]", "bold"))

    def _metavar(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._HelpAction):
            return ""
        if action.nargs == 0:
            return "<bool>"
        if action.choices:
            return "[" + "|".join(map(str, action.choices)) + "]"
        if action.metavar:
            return f"<{str(action.metavar).lower()}>"
        return f"<{_TYPE_NAMES.get(action.type or str, 'text')}>"

    def _console(self, file: IO[str] | None, stderr: bool = False):  # -> rich.console.Console
        from rich.console import Console

        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
        return Console(file=file, stderr=stderr and file is None, width=width, highlight=False)

    def format_help(self) -> str:
        with self._console(None).capture() as captured:
            self._render_help(self._console(None))
        return captured.get()

    def print_help(self, file: IO[str] | None = None) -> None:
        self._render_help(self._console(file))

    def _render_help(self, console) -> None:
        from rich.padding import Padding
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        console.print(Padding(self._usage_line(), (1, 1, 0, 1)))
        if self.description:
            console.print(Padding(Text(self.description), (1, 1, 1, 1)))
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=True)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(style="bold yellow", no_wrap=True)
        table.add_column(ratio=1)
        for action in self._actions:
            help_text = "Show this message and exit." if isinstance(action, argparse._HelpAction) else action.help
            help_text = (help_text or "").replace("%%", "%")
            table.add_row(", ".join(action.option_strings), self._metavar(action), Text(help_text))
        console.print(Panel(table, title="Options", title_align="left", border_style="dim"))

    def error(self, message: str) -> NoReturn:
        from rich.panel import Panel
        from rich.text import Text

        console = self._console(None, stderr=True)
        console.print(self._usage_line())
        console.print(Text(f"Try '{self.prog} --help' for help."), style="dim")
        console.print(Panel(Text(message), title="Error", title_align="left", border_style="red"))
        sys.exit(2)
