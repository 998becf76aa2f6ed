"""What a node can run, and the one rule that says whether a job may go on it.

A node's `NodeCapabilities` say which kinds of executor it offers (a
process on the host, a container), whether it found a container runtime,
and the free-form labels its admin gave it (`schedulearn agent --label
ib`), like Slurm's node features. A job asks through its view: a job
with an `image` needs a container, a job without one a host process,
and `constraints` name labels the node must all carry; a GPU type, when
the job asks for GPUs, must be the node's.

`can_run(job, node)` is that rule, and the only place it is written.
`FreePool` (every policy's placement helper) offers a job only nodes
that pass it, and `GpuLedger` (which every pass of the simulator and
the live scheduler goes through) refuses a placement on a node that
does not, so no policy needs code of its own for it. `unrunnable`
explains, for a refused submission or a waiting job, what no node
offers and what to change.

Unix accounts: an agent started as root runs each job as its owner's
unix account, so it reports the accounts its host has (`accounts`: every
account with a uid of 1000 or more and a login shell, plus root, which
the agent still refuses unless the admin allowed it for the user). A job
goes only on a node that has its owner's account (`JobView.account`).
An agent started as an ordinary user runs every job as itself and
reports `accounts=None`: any job may go there. A job view without an
account (`None`: the simulator, a view built before the owner is known)
is not restricted by accounts; `NO_ACCOUNT` marks an owner who has no
unix account at all, which no node with accounts takes.

The GPU type is read from the node's GPUs (`NodeView.gpu_type`), not
stored here again: the GPUs are its one source. A later capability is a
field here, its key in `as_dict`/`from_dict`, and a clause in `can_run`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # views imports this module; the types are only for annotations
    from schedulearn.core.views import JobView, NodeView

# A label (and a constraint) is one word of letters, digits and . _ - : / =,
# so `ib`, `a100-80g`, `rack=r12` and `zone/eu-1` all work; at most 100 characters.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/=-]{0,99}$"
_LABEL = re.compile(LABEL_PATTERN)
# `JobView.account` of a job whose owner has no unix account: no node that
# runs jobs as their owners takes it.
NO_ACCOUNT = ""


class ExecutorKind(StrEnum):
    """What an executor runs a job as. The agent's executors each declare one."""

    PROCESS = "process"
    CONTAINER = "container"


def check_label(text: str) -> str:
    """`text` as a label, or ValueError saying what a label may contain."""
    if not _LABEL.match(text):
        raise ValueError(
            f"label {text!r} is not a label; use letters, digits and . _ - : / = "
            "(starting with a letter or digit, at most 100 characters), e.g. a100-80g or rack=r12"
        )
    return text


def labels_of(items: Iterable[str]) -> frozenset[str]:
    """Checked labels from a list (duplicates collapse)."""
    return frozenset(check_label(item) for item in items)


@dataclass(frozen=True, slots=True)
class NodeCapabilities:
    """What one node can run.

    The default is a plain node: host processes only, no container
    runtime, no labels (what an agent offers unless told more).
    """

    executors: frozenset[ExecutorKind] = frozenset({ExecutorKind.PROCESS})
    # The container runtime the agent found ("docker 27.1.1", "podman 5.0"),
    # "" when none: a container executor without a runtime runs nothing.
    container_runtime: str = ""
    labels: frozenset[str] = frozenset()
    # The unix accounts jobs may run as (an agent started as root); None: the
    # agent runs every job as its own user, whoever owns it.
    accounts: frozenset[str] | None = None

    @property
    def runs_containers(self) -> bool:
        return ExecutorKind.CONTAINER in self.executors and bool(self.container_runtime)

    @property
    def runs_processes(self) -> bool:
        return ExecutorKind.PROCESS in self.executors

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (the database column and the wire carry this)."""
        return {
            "executors": sorted(e.value for e in self.executors),
            "container_runtime": self.container_runtime,
            "labels": sorted(self.labels),
            "accounts": None if self.accounts is None else sorted(self.accounts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object] | None) -> NodeCapabilities:
        """The inverse of `as_dict`. Unknown keys and unknown executor kinds are
        skipped (a newer agent may report more than this version knows)."""
        if not data:
            return PLAIN
        kinds = {e.value for e in ExecutorKind}
        executors = data.get("executors", ())
        labels = data.get("labels", ())
        runtime = data.get("container_runtime", "")
        accounts = data.get("accounts")
        return cls(
            executors=frozenset(
                ExecutorKind(e)
                for e in (executors if isinstance(executors, list | tuple) else ())
                if e in kinds
            ),
            container_runtime=runtime if isinstance(runtime, str) else "",
            labels=frozenset(str(x) for x in (labels if isinstance(labels, list | tuple) else ())),
            accounts=frozenset(str(x) for x in accounts)
            if isinstance(accounts, list | tuple)
            else None,
        )

    def describe(self) -> str:
        """One line for tables: `process,container(docker 27.1) ib,a100`."""
        kinds = ",".join(
            f"{e.value}({self.container_runtime})"
            if e is ExecutorKind.CONTAINER and self.container_runtime
            else e.value
            for e in sorted(self.executors)
        )
        owners = "" if self.accounts is None else f" as-owner({len(self.accounts)} accounts)"
        return f"{kinds or 'no executor'} {','.join(sorted(self.labels)) or '-'}{owners}"

    def has_account(self, account: str | None) -> bool:
        """May a job running as `account` go here (see the module docstring)?"""
        return self.accounts is None or account is None or account in self.accounts


PLAIN = NodeCapabilities()


def can_run(job: JobView, node: NodeView) -> bool:
    """May `job` go on `node` at all (resources aside)? The one feasibility rule.

    - a job with an image needs a container executor and a container runtime;
      a job without one needs the host-process executor;
    - every constraint of the job must be one of the node's labels;
    - a job that asks for GPUs of a type needs a node of that type;
    - a node that runs jobs as their owners needs the job's unix account.
    """
    caps = node.capabilities
    if job.image is None:
        if ExecutorKind.PROCESS not in caps.executors:
            return False
    elif not caps.runs_containers:
        return False
    if job.constraints and not caps.labels.issuperset(job.constraints):
        return False
    # `caps.has_account(job.account)`, inline: a pass may ask this thousands of times.
    accounts = caps.accounts
    if accounts is not None and job.account is not None and job.account not in accounts:
        return False
    return not (job.gpu_type and job.most_gpus and node.gpu_type != job.gpu_type)


def is_plain(job: JobView) -> bool:
    """A job with no image, constraint or GPU type: for it `can_run` only asks
    whether the node runs host processes (and, on a node that runs jobs as
    their owners, has the job's account)."""
    return job.image is None and not job.constraints and not job.gpu_type


def asks_gpus_only(job: JobView) -> bool:
    """A plain job (`is_plain`) that asks for no CPUs or memory either: it fits
    wherever enough GPUs are free on a node that can run it (`can_run`)."""
    # `is_plain(job)`, inline: asked for every job a pass places.
    return (
        not (job.cpus or job.memory_gb)
        and job.image is None
        and not job.constraints
        and not job.gpu_type
    )


def why_not(job: JobView, node: NodeView) -> str | None:
    """Why `can_run(job, node)` is False (None when it is True), for messages."""
    caps = node.capabilities
    if job.image is None and ExecutorKind.PROCESS not in caps.executors:
        return f"node {node.name!r} runs only container images"
    if job.image is not None and not caps.runs_containers:
        return f"node {node.name!r} has no container runtime"
    missing = sorted(set(job.constraints) - caps.labels)
    if missing:
        return f"node {node.name!r} lacks label {_names(missing)}"
    if job.gpu_type and job.most_gpus and node.gpu_type != job.gpu_type:
        return f"node {node.name!r} has {node.gpu_type or 'untyped'} GPUs, not {job.gpu_type}"
    if not caps.has_account(job.account):
        return f"node {node.name!r} has {_account_of(job)}"
    return None


def _account_of(job: JobView) -> str:
    if job.account == NO_ACCOUNT:
        return f"no unix account for user {job.user!r} (who has none: no enabled user record)"
    return f"no unix account {job.account!r} (user {job.user!r} runs jobs as it)"


def unrunnable(job: JobView, nodes: Sequence[NodeView]) -> str | None:
    """Why no node of `nodes` can run `job` by capability, saying what to change;
    None when one can (or when `nodes` is empty: nothing to judge by).

    GPU-type mismatches alone are left to the caller's own message (it knows
    the types and sizes); this explains images, executors and labels.
    """
    if not nodes or any(can_run(job, n) for n in nodes):
        return None
    if job.image is not None and not any(n.capabilities.runs_containers for n in nodes):
        return (
            "no node runs container images (no agent found a container runtime); drop "
            "--image, or start an agent with a container runtime (schedulearn agent "
            "--executor docker)"
        )
    if job.image is None and not any(n.capabilities.runs_processes for n in nodes):
        return (
            "no node runs host processes (every agent offers containers only); give "
            "--image, or start an agent with --executor subprocess"
        )
    if not any(n.capabilities.has_account(job.account) for n in nodes):
        if job.account == NO_ACCOUNT:
            return (
                f"user {job.user!r} has no unix account (no user record, or a disabled one), "
                "and every node runs jobs as their owner's account; ask an admin to add the "
                f"user (schedulearn user add {job.user or 'NAME'} --unix-account ACCOUNT) or "
                f"enable them (schedulearn user enable {job.user or 'NAME'})"
            )
        return (
            f"no node has unix account {job.account!r} (user {job.user!r} runs jobs as it); "
            f"create it on a node (useradd {job.account}; its agent reports it within a "
            "heartbeat), or ask an admin to set the user's unix account"
        )
    present = sorted({label for n in nodes for label in n.capabilities.labels})
    shown = ", ".join(present) if present else "none"
    absent = sorted(set(job.constraints) - set(present))
    if absent:
        return (
            f"no node has label {_names(absent)}; labels present: {shown}; change "
            f"--constraint, or start an agent with --label {absent[0]}"
        )
    executor = "container runtime" if job.image is not None else "host-process executor"
    candidates = [
        n
        for n in nodes
        if (n.capabilities.runs_containers if job.image else n.capabilities.runs_processes)
        and n.capabilities.labels.issuperset(job.constraints)
    ]
    if not candidates:
        wanted = f" with label {_names(sorted(job.constraints))}" if job.constraints else ""
        per_node = "; ".join(
            f"{n.name}: {','.join(sorted(n.capabilities.labels)) or '-'}"
            + (" (containers)" if n.capabilities.runs_containers else "")
            for n in nodes
        )
        return (
            f"no node with a {executor} has all the labels asked for{wanted}; nodes and "
            f"labels: {per_node}; drop a --constraint or label a node that has them all"
        )
    return None  # capable nodes exist; only the GPU type rules them out


def _names(labels: Sequence[str]) -> str:
    return ", ".join(f"'{label}'" for label in labels)
