"""The agent's settings, and how their defaults are found on this host.

`AgentConfig` is built once (by the `schedulearn agent` command, or by
`schedulearn up` for its local agent) and passed in; nothing in the agent
reads settings from globals.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import platformdirs

from schedulearn.agent.accounts import JobsAs
from schedulearn.protocol import Executor

CgroupMode = Literal["auto", "v1", "v2", "off"]
GpuMode = Literal["auto", "device-requests", "env"]
"""How job containers get their GPUs: NVIDIA device requests, or
NVIDIA_VISIBLE_DEVICES; `auto` picks by whether the engine has the NVIDIA runtime."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    server: str
    # The node credential (or an old-style agent token); "" when `join_token`
    # is to be exchanged for one at start (`agent.credential`).
    token: str
    name: str
    state_dir: Path
    address: str
    gpus: int | None = None
    gpu_type: str | None = None
    cpus: float = 0.0
    memory_gb: float = 0.0
    executors: tuple[Executor, ...] = (Executor.SUBPROCESS,)
    # Free-form node labels jobs may ask for with --constraint (`--label ib`).
    labels: tuple[str, ...] = ()
    docker_url: str | None = None
    network_mode: str = "none"
    gpu_mode: GpuMode = "auto"
    container_init: bool = True
    container_ulimits: dict[str, tuple[int, int]] = field(default_factory=dict)
    workdir: str | None = None
    # What process jobs start from (`agent.jobenv`, docs/job-environment.md):
    # their PATH (None: this interpreter's directory, then the agent's PATH),
    # and variables every job gets (`--env`; the job's own env wins over them).
    job_path: str | None = None
    job_env: dict[str, str] = field(default_factory=dict)
    # Seconds the server may hold a work request open before answering "nothing".
    poll_wait_seconds: float = 20.0
    # On SIGTERM/Ctrl-C: stop the jobs (and report them), or leave them running
    # for the next agent process to re-adopt (the default: an agent upgrade
    # must not kill a week of training).
    stop_jobs_on_exit: bool = False
    exit_grace_seconds: float = 10.0
    # Whom jobs run as (agent.accounts): `schedulearn agent` picks their owners'
    # accounts when started as root, else the agent's own user.
    jobs_as: JobsAs = JobsAs.AGENT
    # Each run's output is spooled on this node's disk (`agent.logspool`) up to
    # this many bytes; past it, lines are counted (and the count said), not kept.
    log_disk_max_bytes: int = 1024**3
    # Start rate (`agent.starts`): runs being started at once, starts a second,
    # and how many of those may begin at once after a quiet spell.
    max_concurrent_starts: int = 32  # the burst: see agent.starts
    max_starts_per_second: float = 500.0
    start_burst: int = 32
    # Containment of process jobs (`agent.cgroups`): which cgroup version ("auto":
    # what the host mounts), or "off" (`--no-cgroups`); each run's pids limit.
    cgroups: CgroupMode = "auto"
    job_pids_max: int = 4096
    # Each GPU's device node by index (`GpuSource.device_paths`, filled in when
    # the agent is built): a run may open its own GPUs' nodes only.
    gpu_devices: dict[int, str] = field(default_factory=dict)
    # Where virtual GPUs' device nodes are (`DIR/nvidiaN`; tests make them with mknod).
    gpu_device_dir: str | None = None
    # A one-time join token from `schedulearn node add`, exchanged at start.
    join_token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        # Never print the credential (a config may end up in a log line).
        return f"AgentConfig(server={self.server!r}, name={self.name!r}, token=<hidden>)"


def default_name() -> str:
    return socket.gethostname() or "node"


def default_state_dir(name: str, jobs_as_owners: bool = False) -> Path:
    """Where an agent keeps its state unless told: the user's state directory,
    or /var/lib for a root agent that runs jobs as their owners (root's home is
    closed to other users, and those jobs must reach their checkpoint
    directories under the state directory)."""
    if jobs_as_owners and os.geteuid() == 0:
        return Path("/var/lib/schedulearn/agent") / name
    return platformdirs.user_state_path("schedulearn") / "agent" / name


def host_cpus() -> float:
    return float(os.cpu_count() or 1)


def host_memory_gb() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0.0
    return round(pages * page_size / 1024**3, 1)


def address_towards(server_url: str) -> str:
    """The local address this host uses to reach the server.

    Other nodes of a gang reach this node at it (torchrun's master address).
    Connecting a UDP socket sends nothing; it only asks the kernel's route.
    """
    parts = urlsplit(server_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        address: str = s.getsockname()[0]
        return address
    return "127.0.0.1"


def parse_ulimit(text: str) -> tuple[str, tuple[int, int]]:
    """`nofile=1024:2048` or `memlock=-1` -> ("nofile", (1024, 2048))."""
    name, sep, values = text.partition("=")
    soft_text, _, hard_text = values.partition(":")
    problem = ValueError(f"ulimit {text!r} should look like nofile=1024:2048 or memlock=-1")
    if not sep or not name:
        raise problem
    try:
        soft = int(soft_text)
        hard = int(hard_text) if hard_text else soft
    except ValueError:
        raise problem from None
    return name, (soft, hard)
