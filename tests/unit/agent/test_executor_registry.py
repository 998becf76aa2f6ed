"""The agent's executor registry: building executors by name, and the capabilities
the offered ones give the node (what the agent reports at registration). A
container executor's runtime is checked with a real engine in
tests/integration/agent/test_agent_capabilities.py."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from schedulearn.agent.config import AgentConfig
from schedulearn.agent.errors import AgentError
from schedulearn.agent.executors import registry
from schedulearn.agent.service import build_executors
from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities
from schedulearn.protocol import Executor


def config(tmp_path: Path, **fields: Any) -> AgentConfig:
    return AgentConfig(
        server="http://127.0.0.1:1",
        token="t",
        name="n1",
        state_dir=tmp_path,
        address="127.0.0.1",
        **fields,
    )


def test_every_wire_executor_has_a_module_with_build_and_a_kind() -> None:
    assert set(registry.MODULES) == {e.value for e in Executor}
    for module in registry.MODULES.values():
        assert callable(importlib.import_module(module).build)


def test_an_unknown_executor_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(registry.UnknownExecutor, match="the executors are: docker, subprocess"):
        registry.build("wasm", config(tmp_path))


def test_a_process_only_agent_reports_a_plain_node_with_its_labels(tmp_path: Path) -> None:
    executors = build_executors(config(tmp_path))
    assert list(executors) == [Executor.SUBPROCESS]
    caps = registry.capabilities(executors.values(), ["ib", "rack=r1"])
    assert caps == NodeCapabilities(
        executors=frozenset({ExecutorKind.PROCESS}), labels=frozenset({"ib", "rack=r1"})
    )
    assert not caps.runs_containers
    with pytest.raises(ValueError, match="not a label"):
        registry.capabilities(executors.values(), ["has space"])


def test_docker_without_an_engine_is_a_setup_error_saying_what_to_change(tmp_path: Path) -> None:
    broken = config(
        tmp_path,
        executors=(Executor.SUBPROCESS, Executor.DOCKER),
        docker_url=f"unix://{tmp_path}/no-such.sock",
    )
    with pytest.raises(AgentError, match="cannot reach a Docker engine"):
        build_executors(broken)
