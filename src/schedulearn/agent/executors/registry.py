"""The agent's executors by name, and the capabilities the ones it offers give its node.

Each executor is one module of this package with a `build(config)` that
returns it (raising `StartError`, with what to change, when it cannot be
offered on this host: no engine, no runtime), and whose executor class
says what it runs a job as (`runs`: a host process or a container) and
which container runtime it reached (`runtime`). Adding one is that
module, its tests, its line in `MODULES` and its wire name in
`protocol.Executor`; nothing else in the agent or the server names it:
the server places jobs by the capabilities the agent reports, and the
agent hands a job to its executor of the kind the job needs.

Modules are imported only when their executor is offered, so a
process-only agent never loads the Docker SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping

from schedulearn.agent.config import AgentConfig
from schedulearn.agent.executors.base import ExecutorImpl
from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities, labels_of
from schedulearn.protocol import Executor

MODULES: Mapping[str, str] = {
    Executor.SUBPROCESS: "schedulearn.agent.executors.process",
    Executor.DOCKER: "schedulearn.agent.executors.container",
}


class UnknownExecutor(ValueError):
    """An executor name no module provides; the message lists those that do."""


def build(name: Executor | str, config: AgentConfig) -> ExecutorImpl:
    """Build executor `name` for this agent; `StartError` when the host cannot offer it."""
    module = MODULES.get(str(name))
    if module is None:
        raise UnknownExecutor(
            f"no executor {str(name)!r}; the executors are: {', '.join(sorted(MODULES))}"
        )
    executor: ExecutorImpl = importlib.import_module(module).build(config)
    return executor


def capabilities(
    executors: Iterable[ExecutorImpl],
    labels: Iterable[str],
    accounts: frozenset[str] | None = None,
) -> NodeCapabilities:
    """What a node offering `executors`, labelled `labels`, can run; `accounts`:
    the unix accounts it runs jobs as (None: every job as the agent's own user)."""
    offered = list(executors)
    runtimes = sorted(
        {e.runtime for e in offered if e.runs is ExecutorKind.CONTAINER and e.runtime}
    )
    return NodeCapabilities(
        executors=frozenset(e.runs for e in offered),
        container_runtime=", ".join(runtimes),
        labels=labels_of(labels),
        accounts=accounts,
    )
