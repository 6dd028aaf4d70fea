"""The backends a test of a native op runs with: "torch" (the fallback) always, "native" where built."""

from __future__ import annotations

import pytest

from graphtier.service.native_ops import native_available, unavailable_reason

needs_native = pytest.mark.skipif(not native_available(), reason=f"native ops not built: {unavailable_reason()}")
BACKENDS = ["torch", pytest.param("native", marks=needs_native)]
