"""`schedulearn.core` imports nothing but the standard library (and itself)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import schedulearn.core

CORE = Path(schedulearn.core.__file__).parent


def outside_imports(source: str, package: str) -> list[str]:
    """Modules `source` imports that are neither standard library nor in `core`.

    `package` is the dotted package the module lives in, to resolve
    relative imports.
    """
    bad: list[str] = []
    for stmt in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(stmt, ast.Import):
            names = [alias.name for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                base = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                names = [".".join([*base, stmt.module] if stmt.module else base)]
            else:
                names = [stmt.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names:
                continue
            if name == "schedulearn.core" or name.startswith("schedulearn.core."):
                continue
            bad.append(name)
    return bad


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_has_modules_to_check() -> None:
    names = {p.name for p in core_modules()}
    assert {"views.py", "ledger.py", "placement.py", "tiresias.py"} <= names


def test_core_imports_only_the_standard_library() -> None:
    offenders = {}
    for path in core_modules():
        parts = path.relative_to(CORE.parent.parent).with_suffix("").parts
        package = ".".join(parts[:-1])
        found = outside_imports(path.read_text(), package)
        if found:
            offenders[str(path.relative_to(CORE))] = found
    assert offenders == {}, f"core must import only the standard library: {offenders}"


def test_the_check_catches_third_party_and_other_layers() -> None:
    pkg = "schedulearn.core.policies"
    assert outside_imports("import numpy as np", pkg) == ["numpy"]
    assert outside_imports("from schedulearn.sim import engine", pkg) == ["schedulearn.sim"]
    assert outside_imports("from ...server import app", pkg) == ["schedulearn.server"]
    assert outside_imports("def f():\n    import httpx\n", pkg) == ["httpx"]
    assert outside_imports("from ..placement import FreePool\nimport heapq", pkg) == []
