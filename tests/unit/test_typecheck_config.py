"""mypy checks every test module under the name pytest imports it by.

The tests import their helpers by file name (`import waiting`), since
pytest puts each test's folder on sys.path; `[tool.mypy]` lists each test
folder as a base (`mypy_path`) for the same reason. A folder left off the
list gives its modules other names there than pytest's, and a nested
conftest.py left out of the exclusion stops mypy with a duplicate module
(scripts/typecheck checks those one run each).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _mypy() -> dict[str, object]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mypy: dict[str, object] = config["tool"]["mypy"]
    return mypy


def _test_folders() -> set[str]:
    tests = REPO / "tests"
    folders = {p.parent for p in tests.rglob("*.py") if "__pycache__" not in p.parts}
    return {str(f.relative_to(REPO)) for f in folders}


def test_every_test_folder_is_a_base_of_mypy() -> None:
    mypy = _mypy()
    assert mypy["explicit_package_bases"] is True
    assert mypy["files"] == ["src/schedulearn", "tests"]
    paths = mypy["mypy_path"]
    assert isinstance(paths, list)
    listed = {p for p in paths if p.startswith("tests")}
    assert listed == _test_folders(), "add each test folder to mypy_path in pyproject.toml"


def test_only_the_nested_conftests_are_left_to_their_own_runs() -> None:
    exclude = _mypy()["exclude"]
    assert isinstance(exclude, list)
    pattern = re.compile("|".join(exclude))
    modules = [str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")]
    excluded = sorted(m for m in modules if pattern.search(m))
    nested = sorted(m for m in modules if m.endswith("/conftest.py") and m != "tests/conftest.py")
    assert excluded == nested
    # scripts/typecheck's globs reach each of them.
    assert all(m.count("/") <= 3 for m in nested), nested
