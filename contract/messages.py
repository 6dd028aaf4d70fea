"""How a problem reads to a user: a pydantic validation error as one line, a long value cut short.

The daemon, the CLI and the data plane validate with pydantic and report every problem the
same way -- `field.path: what is wrong (got the value)`, joined by `; ` -- so a bad value
reads alike wherever it is caught.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from pydantic import ValidationError


def shorten(text: str, limit: int) -> str:
    """`text`, or its head and tail around a note of how much was cut: a caller who sends
    megabytes must not get them written to a log, or echoed back, whole."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 4
    return f"{text[:head]}... [{len(text) - head - tail} characters cut] ...{text[-tail:]}"


def describe_validation_error(
    error: ValidationError,
    *,
    whole: str = "(top)",
    inputs: bool = True,
    input_limit: int | None = None,
    known: Collection[str] = (),
) -> str:
    """Every problem of `error` as `location: message (got value)`, joined by `; `.

    `whole` names the location of a problem with the whole object (pydantic's empty
    location). `inputs` adds the value given for a field (never for the whole object: that
    would be all of it); `input_limit` cuts each value's repr to about that many characters.
    `known`: the field names; an unknown one close to one of them (`fanout`) names it.
    """
    problems = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        text = f"{where or whole}: {problem['msg']}"
        if problem["type"] == "extra_forbidden" and problem["loc"]:
            close = difflib.get_close_matches(str(problem["loc"][-1]), known, n=1)
            text += f" (did you mean {close[0]!r}?)" if close else ""
        if inputs and where:
            given = repr(problem.get("input"))
            text += f" (got {given if input_limit is None else shorten(given, input_limit)})"
        problems.append(text)
    return "; ".join(problems)
