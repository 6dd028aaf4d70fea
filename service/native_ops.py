"""Lazy loading of graphtier's compiled ops (`torch.ops.graphtier.*`) and backend choice.

The shared object `graphtier.service._native` is built by `python setup.py build_ext
--inplace`; importing it registers the ops. Nothing is imported until an op is first needed,
and a missing build degrades to the pure-torch fallbacks with one warning per process.
Set GRAPHTIER_NO_NATIVE=1 to force the fallbacks.

Bad input is refused in Python before an op is called (ids and seeds in range, seeds
unique), or, for the gather's ids, reported by the op as a position in its result, which
Python words (that spares a second pass over every batch): the ops' own checks are last-line
asserts, never the user's error message. Formatting
a c10 error message inside the extension crashed the process (SIGSEGV in the ostream code the
extension carries) when built on the CUDA image with torch 2.11, so that path is never relied on.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Literal

from graphtier.contract.environment import NO_NATIVE_ENV
from graphtier.contract.errors import GraphtierError

Backend = Literal["auto", "native", "torch"]
BACKENDS: tuple[str, ...] = ("auto", "native", "torch")

_state: dict[str, object] = {}


def native_available() -> bool:
    """True when the compiled ops can be used; the import is attempted once and cached."""
    if "available" not in _state:
        if os.environ.get(NO_NATIVE_ENV) == "1":
            _state["available"], _state["reason"] = False, f"{NO_NATIVE_ENV}=1 is set"
        else:
            try:
                import torch  # noqa: F401  (loads libc10/libtorch, which the extension links against)

                importlib.import_module("graphtier.service._native")
                _state["available"], _state["reason"] = True, ""
            except ImportError as exc:
                _state["available"], _state["reason"] = False, f"cannot import graphtier.service._native: {exc}"
    return bool(_state["available"])


def unavailable_reason() -> str:
    """Why the native ops are not available ('' when they are)."""
    native_available()
    return str(_state["reason"])


def resolve_backend(backend: str, what: str) -> Literal["native", "torch"]:
    """Turn a user's backend choice into the one to run for operation `what`.

    'auto' picks native when built, else torch (warning once per process); 'native' fails
    with GraphtierError when the ops are not built; 'torch' always runs the fallback.
    """
    if backend not in BACKENDS:
        raise GraphtierError(f"{what}: backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return "torch"
    if native_available():
        return "native"
    if backend == "native":
        raise GraphtierError(
            f"{what}: backend 'native' was requested but the native ops are unavailable "
            f"({unavailable_reason()}); build them with `python setup.py build_ext --inplace`"
        )
    if not _state.get("warned"):
        _state["warned"] = True
        warnings.warn(
            f"graphtier native ops unavailable ({unavailable_reason()}); using the slower "
            "pure-torch fallbacks. Build them with `python setup.py build_ext --inplace`.",
            RuntimeWarning,
            stacklevel=3,
        )
    return "torch"
