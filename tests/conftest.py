"""Suite-wide rules, for serial and parallel (pytest-xdist) runs alike.

- A missing dependency of a marked suite is decided in one place,
  `dependencies.missing`: a failure in CI (CI=true or
  SCHEDULEARN_REQUIRE_ALL=1), a skip with the reason elsewhere. The report
  header says which mode is in force.
- Waits go through `waiting.wait_until` (this directory is on sys.path,
  so tests import `waiting` and `dependencies` directly).
- Parallel runs (`pytest -n N --dist loadgroup`): each worker is its own
  process with its own session fixtures (PostgreSQL server, temp dirs),
  every server takes a free port, and what cannot be shared between workers
  is kept on one worker by an xdist group: tests using a container engine
  (agents on one engine see each other's labelled containers) and the
  browser tests (one server cluster and one Chromium, not one per worker).
  Gangs' MASTER_PORTs get a range per worker, so two workers' multi-node
  jobs never rendezvous on the same port.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dependencies import REQUIRE_ALL_VARIABLE, Dependency, missing, require_all

CONTAINER_FIXTURES = frozenset({"docker_image", "podman_url"})
GANG_PORTS_PER_WORKER = 2000  # job ids in one test run stay far below this
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def pytest_report_header(config: pytest.Config) -> str:
    if require_all():
        return "missing test dependencies: FAIL (CI or " + REQUIRE_ALL_VARIABLE + "=1)"
    return "missing test dependencies: skip (set " + REQUIRE_ALL_VARIABLE + "=1 to fail)"


def _worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a worker
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def pytest_configure(config: pytest.Config) -> None:
    index = _worker_index()
    if index is not None and "SCHEDULEARN_GANG_BASE_PORT" not in os.environ:
        # Servers built or started by this worker inherit it; 20000 + ... stays
        # below Linux's ephemeral ports, where free_port() picks servers' ports.
        base = 20000 + (index % 6) * GANG_PORTS_PER_WORKER
        os.environ["SCHEDULEARN_GANG_BASE_PORT"] = str(base)


def _group(item: pytest.Item) -> str | None:
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & CONTAINER_FIXTURES or item.get_closest_marker("docker") is not None:
        return "containers"
    if item.get_closest_marker("browser") is not None or "tests/browser/" in item.nodeid:
        return "browser"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def traces() -> Path:
    """`../shared/traces` beside the checkout: the real public trace files."""
    if not (TRACES / "README.md").is_file():
        missing(Dependency.TRACES, f"no {TRACES / 'README.md'}")
    return TRACES
