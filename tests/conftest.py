"""Suite-wide rules, for serial and parallel (pytest-xdist) runs alike.

- A missing dependency of a marked suite is decided in one place,
  `dependencies.missing`: a failure in CI (CI=true or
  SCHEDULEARN_REQUIRE_ALL=1), a skip with the reason elsewhere. The report
  header says which mode is in force.
- Waits go through `waiting.wait_until` (this directory is on sys.path,
  so tests import `waiting` and `dependencies` directly).
- Parallel runs (`pytest -n N`): each worker is its own process with its
  own session fixtures (PostgreSQL server, browser cluster, temp dirs),
  every server takes a free port, tests using a container engine take
  turns (a file lock: agents on one engine see each other's labelled
  containers), and gangs' MASTER_PORTs get a range per worker, so two
  workers' multi-node jobs never rendezvous on the same port.
- Ctrl-C works in every process the tests start (`_ctrl_c_heard`), even
  when the run itself was started in the background with SIGINT ignored.
- Parallel runs start the long modules first, by the durations a recorded
  run measured (`durations.json`; `_cost`): with scripts/test's
  `--maxschedchunk 1` each worker takes the next test when it is free, so
  the run does not end with one worker on a ten-minute test the other
  could have started at the beginning.
- Servers and agents the tests start through `cli.localcluster` (and the
  integration suite's `served` and `agent_support`) are forked from a warm
  parent that has imported them (`warm_parent`).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import warm_parent
from dependencies import REQUIRE_ALL_VARIABLE, Dependency, missing, require_all
from schedulearn.cli import localcluster

CONTAINER_FIXTURES = frozenset({"docker_image", "podman_url"})
CONTAINER_LOCK = Path(tempfile.gettempdir()) / "schedulearn-tests-containers.lock"
GANG_PORTS_PER_WORKER = 2000  # job ids in one test run stay far below this
TRACES = Path(__file__).resolve().parents[1] / "traces"  # shipped in the checkout
PUBLIC_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def pytest_report_header(config: pytest.Config) -> str:
    if require_all():
        return "missing test dependencies: FAIL (CI or " + REQUIRE_ALL_VARIABLE + "=1)"
    return "missing test dependencies: skip (set " + REQUIRE_ALL_VARIABLE + "=1 to fail)"


def _worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a worker
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def _ctrl_c_heard() -> None:
    """Undo an ignored SIGINT and SIGQUIT, so the processes the tests start heed them.

    A shell starts a background command (`.ci/run ... &`, a CI runner's
    job) with SIGINT and SIGQUIT ignored, and every process it starts
    inherits that: a Python program then gets no KeyboardInterrupt, so the
    tests' Ctrl-C to `schedulearn up` or a documented benchmark did nothing
    (CI's log: each of the docs' long commands ran until its 60 s kill, at
    full CPU, beside the other worker's tests). A handler, unlike SIG_IGN,
    is reset to the default in each program exec'd from here.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    _ctrl_c_heard()
    record = os.environ.get(RECORD_DURATIONS_VARIABLE)
    if record and _worker_index() is None:
        config.pluginmanager.register(_DurationRecord(Path(record)), "duration-record")
    index = _worker_index()
    if index is not None and "SCHEDULEARN_GANG_BASE_PORT" not in os.environ:
        # Servers built or started by this worker inherit it; 20000 + ... stays
        # below Linux's ephemeral ports, where free_port() picks servers' ports.
        base = 20000 + (index % 6) * GANG_PORTS_PER_WORKER
        os.environ["SCHEDULEARN_GANG_BASE_PORT"] = str(base)


# Seconds each test took (setup, call and teardown) in a recorded full run:
# parallel runs start the longest first. Record it again with
# `SCHEDULEARN_TEST_RECORD_DURATIONS=tests/durations.json scripts/test`.
DURATIONS = Path(__file__).with_name("durations.json")
RECORD_DURATIONS_VARIABLE = "SCHEDULEARN_TEST_RECORD_DURATIONS"

# A test the record does not know yet (new, or renamed): a guess by where it
# lives. A real cluster, browser or fresh clone costs seconds to minutes; a
# unit test milliseconds.
_SECONDS_BY_DIRECTORY = (
    ("tests/e2e/", 15.0),
    ("tests/browser/", 8.0),
    ("tests/integration/agent/", 6.0),
    ("tests/packaging/", 5.0),
    ("tests/integration/", 0.5),
)
_SLOW_SECONDS = 60.0  # marked `slow`: a fresh clone, a 1,000-job array, a flood of output


def _recorded_durations() -> dict[str, float]:
    try:
        recorded = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in recorded.items()}


def _cost(item: pytest.Item, recorded: dict[str, float]) -> float:
    if item.nodeid in recorded:
        return recorded[item.nodeid]
    if item.get_closest_marker("slow") is not None:
        return _SLOW_SECONDS
    where = item.nodeid
    return next((cost for prefix, cost in _SECONDS_BY_DIRECTORY if where.startswith(prefix)), 0.05)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the longest modules first, by their tests' recorded
    durations (`DURATIONS`), each module's tests in file order: a module's
    tests may share a module-scoped cluster and expect its state in that
    order (tests/e2e/test_cli_everyday.py), and interleaving modules would
    start such a cluster again for each test. Every worker collects the same
    list, so the controller hands tests out in this order; a serial run keeps
    file order."""
    if _worker_index() is None:
        return
    recorded = _recorded_durations()
    per_module: dict[str, float] = {}
    for item in items:
        per_module[_module(item)] = per_module.get(_module(item), 0.0) + _cost(item, recorded)
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-per_module[_module(item)], position[id(item)]))


class _DurationRecord:
    """Sums each test's phases as their reports arrive (in the controller of a
    parallel run too), and writes them, longest first, when the run ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _worker_index() is not None or not self.seconds:
            return
        ordered = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        text = json.dumps({k: round(v, 2) for k, v in ordered}, indent=0)
        self.path.write_text(text + "\n")


def _uses_containers(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(fixtures & CONTAINER_FIXTURES) or item.get_closest_marker("docker") is not None


@pytest.fixture(autouse=True)
def _one_container_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Container tests of parallel workers take turns on the one engine.

    An agent lists the containers labelled with its node name, and every
    test's agents are called n1, d1, ...: two at once on one engine would
    adopt or stop each other's containers. A file lock (not an xdist group:
    pytest-xdist 3.8's groups do not work with pytest 9) serialises them across
    worker processes; it is taken before this test's other fixtures and
    released after their teardown (its containers are gone by then).
    """
    if not _uses_containers(request.node):
        yield
        return
    with CONTAINER_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _spawn_warm(self: localcluster.Proc, args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    return warm_parent.popen(args, **kw)


@pytest.fixture(scope="session", autouse=True)
def _servers_and_agents_from_a_warm_parent() -> Iterator[None]:
    """`ServerProcess` and `AgentProcess` (`cli.localcluster`) fork from a
    warm parent (`warm_parent`): a server's start cost 2.7 s of CPU, 2.2 s of
    it importing what every server imports again."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(localcluster.Proc, "spawn", _spawn_warm)
        yield


@pytest.fixture
def traces() -> Path:
    """The checkout's `traces/`: the public traces as the project's loaders read them."""
    return TRACES


@pytest.fixture
def public_traces() -> Path:
    """`../shared/traces` beside the checkout: the public files `traces/` is written from."""
    if not (PUBLIC_TRACES / "README.md").is_file():
        missing(Dependency.TRACES, f"no {PUBLIC_TRACES / 'README.md'}")
    return PUBLIC_TRACES
