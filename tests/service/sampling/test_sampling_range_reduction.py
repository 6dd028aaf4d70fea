"""The host's `uniform_below` (a double division, for speed) equals the integer modulo the Python
twin and the CUDA kernels use, also where a rounded quotient lands on the next integer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).resolve().parents[3] / "native" / "include"

PROGRAM = r"""
#include <cstdio>
#include "graphtier/counter_rng.h"
using graphtier::uniform_below;
int main() {
  const uint64_t top = (uint64_t{1} << 53) - 1;
  const uint64_t divisors[] = {1, 2, 3, 5, 7, 1000003, (uint64_t{1} << 20) + 7, (uint64_t{1} << 31) - 1,
                               (uint64_t{1} << 40) + 3, (uint64_t{1} << 52) + 1, top};
  long checked = 0, wrong = 0;
  auto check = [&](uint64_t x, uint64_t m) {
    ++checked;
    if (static_cast<uint64_t>(uniform_below(x << 11 | 0x7ff, static_cast<int64_t>(m))) != x % m) {
      if (++wrong < 5) std::printf("x=%llu m=%llu\n", (unsigned long long)x, (unsigned long long)m);
    }
  };
  for (uint64_t m : divisors) {
    const uint64_t most = top / m;  // quotients near the top have the least precision to spare
    for (uint64_t q = most > 4096 ? most - 4096 : 1; q <= most; ++q) {
      for (int delta = -1; delta <= 1; ++delta) {
        const uint64_t x = q * m + delta;
        if (x <= top) check(x, m);
      }
    }
    check(top, m);
    check(0, m);
  }
  uint64_t state = 1;  // random words against every degree up to 5000
  for (uint64_t m = 1; m <= 5000; ++m) {
    for (int i = 0; i < 200; ++i) {
      state = graphtier::splitmix64(state);
      check(state >> 11, m);
    }
  }
  std::printf("checked %ld wrong %ld\n", checked, wrong);
  return wrong != 0;
}
"""


def test_uniform_below_equals_the_integer_modulo(tmp_path: Path) -> None:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler on PATH (the native build needs one too)")
    source, binary = tmp_path / "range.cpp", tmp_path / "range"
    source.write_text(PROGRAM)
    subprocess.run([compiler, "-O2", "-std=c++17", f"-I{INCLUDE}", str(source), "-o", str(binary)], check=True)
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    assert "wrong 0" in done.stdout and "checked 0 " not in done.stdout
