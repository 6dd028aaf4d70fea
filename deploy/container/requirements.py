"""Prints the image's runtime requirements, one a line, for the torch installed beside it: setup.py's
DEPENDENCIES, and its GPU_DEPENDENCIES only where that torch is a CUDA build (cuda-bindings pinned to
its CUDA major, as setup.py pins it). Read from setup.py's text, so the image's requirements layer
changes only when they do, and a CPU image carries no package that only the GPU tiers use.

    python deploy/container/requirements.py setup.py > /tmp/requirements.txt
"""

from __future__ import annotations

import ast
import sys


def main(setup_py: str) -> None:
    tree = ast.parse(open(setup_py).read())
    lists = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        if node.targets[0].id in ("DEPENDENCIES", "GPU_DEPENDENCIES")
    }
    pin = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "cuda_bindings_requirement")
    namespace: dict = {}
    exec(compile(ast.Module([pin], []), setup_py, "exec"), namespace)
    cuda_bindings_requirement = namespace["cuda_bindings_requirement"]

    import torch

    requirements = list(lists["DEPENDENCIES"])
    if torch.version.cuda:
        for requirement in lists["GPU_DEPENDENCIES"]:
            if requirement.startswith("cuda-bindings"):
                requirement = cuda_bindings_requirement(torch.version.cuda)
            requirements.append(requirement)
    print("\n".join(requirements))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "setup.py")
