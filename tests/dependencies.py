"""What a test does when something it needs is not on this machine.

One function decides, `missing(dependency, why)`: in CI (`CI=true`, or
`SCHEDULEARN_REQUIRE_ALL=1`, which scripts/test sets) a missing PostgreSQL,
Docker engine, Chromium, trace set or training library FAILS the test with
a message naming what is missing, so a green CI never hides a suite that did
not run; on a developer's machine the test is skipped with the same message.

Every skip-on-missing site in tests/ calls this (the root conftest.py shows
the mode in the report header). Skips for conditions that are not a missing
dependency (this host HAS NVIDIA GPUs) stay plain skips.
"""

from __future__ import annotations

import enum
import importlib.util
import os
from typing import NoReturn

import pytest

REQUIRE_ALL_VARIABLE = "SCHEDULEARN_REQUIRE_ALL"


class Dependency(enum.Enum):
    """A thing a marked suite needs; the value says how to get it."""

    POSTGRES = "PostgreSQL 15 (apt-get install -y postgresql-15)"
    DOCKER = "a Docker engine (apt-get install -y docker.io busybox-static)"
    PODMAN = "Podman (apt-get install -y podman catatonit)"
    BROWSER = "Chromium (apt-get install -y chromium)"
    TRACES = "the public trace files (../shared/traces beside the checkout)"
    TORCH = "PyTorch (uv pip install /opt/wheels/torch-2.13.0+cpu-*.whl)"
    SKLEARN = "scikit-learn (the dev dependency group: uv sync)"
    ROOT = "root (scripts/test runs as root: it installs packages, makes unix accounts)"
    SHARED_PYTHON = (
        "a Python that other unix accounts may run with schedulearn importable "
        "(a checkout and uv-managed Python other accounts can read)"
    )


def require_all() -> bool:
    """True in CI, where a missing dependency is a failure rather than a skip."""
    ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    return ci or os.environ.get(REQUIRE_ALL_VARIABLE, "").strip() == "1"


def missing(dependency: Dependency, why: str) -> NoReturn:
    """Skip (locally) or fail (in CI) because `dependency` is not available."""
    message = f"missing {dependency.name.lower()}: {why}; needs {dependency.value}"
    if require_all():
        pytest.fail(
            f"{message} (CI=true or {REQUIRE_ALL_VARIABLE}=1: a missing dependency fails)",
            pytrace=False,
        )
    pytest.skip(message)


def need_root(why: str) -> None:
    """`missing(ROOT, why)` unless this process runs as root."""
    if os.geteuid() != 0:
        missing(Dependency.ROOT, why)


def need_module(module: str, dependency: Dependency) -> None:
    """`missing(...)` unless the Python module `module` can be imported."""
    if importlib.util.find_spec(module) is None:
        missing(dependency, f"the module {module!r} is not installed in this environment")
