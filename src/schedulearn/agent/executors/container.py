"""The Docker executor: a job is a container, through the Docker SDK.

It speaks the Docker Engine API, so it works against Docker and against
Podman's Docker-compatible socket (`--docker-url
unix:///run/podman/podman.sock`) alike.

A job's container gets its image and command (the image's entrypoint,
if any, is kept, as with `docker run IMAGE CMD`), the job's environment
plus Schedulearn's (launchers.py), its shm size and CPU/memory limits,
the labels `schedulearn.job`, `schedulearn.attempt` and `schedulearn.node`
that name it (a restarted agent finds its containers by them), a network
mode (default `none`: a training job reaches nothing unless the admin
allows it; `host` for multi-node jobs), and the job's checkpoint
directory mounted at `/schedulearn/checkpoint`.

Whom it runs as (`agent.accounts`): the job's owner's uid:gid (with the
account's groups), or, for an agent that runs every job as itself and
is not root, the agent's uid:gid; never privileged, every capability
dropped, `no-new-privileges` set. Only the job's checkpoint directory
and its own progress folder (both its account's) are mounted: nothing
else of the agent's state, and nothing else of the host.

GPUs: when the engine has the NVIDIA runtime, the job's GPUs are passed
as device requests; the container then sees only them, numbered from 0,
so `CUDA_VISIBLE_DEVICES` counts from 0. Otherwise `NVIDIA_VISIBLE_DEVICES`
names the host's indices (what the NVIDIA container hooks read).

Stops: `docker stop` sends SIGTERM to the container's init, which hands
it on. Docker's init (tini) is told to hand it to the job's whole process
group (`TINI_KILL_PROCESS_GROUP`), as the process executor signals the
group: a string command's shell (`launchers.STOP_TRAPS`) and the program
it runs both get it, so the program saves and the shell waits for it.
Podman's init (catatonit) hands it to one process only and takes no
variable, so on Podman the job's entrypoint is that same init again with
`-g` (signal the child's process group), in front of the image's own
entrypoint: the first init hands the signal to the second, which hands it
to the whole group. With `--no-container-init` the signal reaches the
container's first process only: there a string command should `exec` its
program to stop gracefully.

The SDK blocks, so every call runs in a daemon thread: a container that
runs for a week must not hold up the agent's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
from docker.types import DeviceRequest, Ulimit

from schedulearn.agent import accounts
from schedulearn.agent.accounts import Account
from schedulearn.agent.config import AgentConfig, GpuMode
from schedulearn.agent.executors.base import (
    ExitStatus,
    LineSink,
    NewRecord,
    OutputLine,
    RunHandle,
    StartError,
    decode,
    split_lines,
)
from schedulearn.agent.launchers import LaunchError, plan_launch
from schedulearn.agent.progress import CONTAINER_PROGRESS_DIR, progress_file
from schedulearn.agent.state import PROGRESS_FILE, JobRecord
from schedulearn.core.capabilities import ExecutorKind
from schedulearn.protocol import Assignment, Executor, LogStream

log = logging.getLogger(__name__)

CONTAINER_CHECKPOINT_DIR = "/schedulearn/checkpoint"
# Where Podman mounts its init (catatonit) in a container run with an init.
PODMAN_INIT = "/run/podman-init"
LABEL_JOB = "schedulearn.job"
LABEL_ATTEMPT = "schedulearn.attempt"
LABEL_NODE = "schedulearn.node"
T = TypeVar("T")


def _threaded(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Run a blocking SDK call in a daemon thread; its result as a future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # without an error, result is fn()'s T

    def target() -> None:
        try:
            result = fn()
        except BaseException as exc:
            outcome: tuple[T | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        # RuntimeError: the loop has closed because the agent is exiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def container_name(node: str, job_id: int, attempt: int) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", node).strip(".-") or "node"
    return f"schedulearn-{safe}-{job_id}-{attempt}"


class DockerExecutor:
    """Runs jobs as containers on a Docker (or Podman) engine."""

    kind = Executor.DOCKER
    runs = ExecutorKind.CONTAINER
    containment = "container"

    def __init__(
        self,
        node_name: str,
        base_url: str | None = None,
        network_mode: str = "none",
        gpu_mode: GpuMode = "auto",
        init: bool = True,
        ulimits: dict[str, tuple[int, int]] | None = None,
        node_env: dict[str, str] | None = None,
        pids_max: int = 0,
    ) -> None:
        self.node_name = node_name
        # Each container's pids limit (the agent's --job-pids-max, as process runs get).
        self.pids_max = pids_max
        # The agent's `--env`: under the job's own env (PATH etc. are the image's).
        self.node_env = dict(node_env or {})
        self.network_mode = network_mode
        self.init = init
        self.ulimits = ulimits or {}
        try:
            if base_url:
                self.client = docker.DockerClient(
                    base_url=base_url, version="auto", max_pool_size=64
                )
            else:
                self.client = docker.from_env(version="auto", max_pool_size=64)
            info = self.client.info()
        except docker.errors.DockerException as exc:
            where = base_url or "the default Docker socket (DOCKER_HOST)"
            raise StartError(
                f"cannot reach a Docker engine at {where}: {exc}; start Docker (or "
                "`podman system service`) or pass --docker-url"
            ) from exc
        # Reported as the node's container runtime (`schedulearn nodes` shows it).
        self.runtime = f"docker {info.get('ServerVersion') or '(version unknown)'}"
        # Podman's init needs telling (`-g`) to signal the job's process group.
        self.group_init = init and _is_podman(self.client)
        has_nvidia = "nvidia" in (info.get("Runtimes") or {})
        self.device_requests = gpu_mode == "device-requests" or (gpu_mode == "auto" and has_nvidia)

    # --- start -----------------------------------------------------------------

    async def start(
        self, assignment: Assignment, record: JobRecord, account: Account | None = None
    ) -> RunHandle:
        if not assignment.image:
            raise StartError(
                f"job {assignment.job_id} has no image; the docker executor runs images — "
                "give the job an image or run it with the subprocess executor"
            )
        try:
            plan = plan_launch(
                assignment,
                CONTAINER_CHECKPOINT_DIR,
                in_container=True,
                renumber_gpus=self.device_requests,
                progress_file=f"{CONTAINER_PROGRESS_DIR}/{PROGRESS_FILE}",
                node_env=self.node_env,
            )
        except LaunchError as exc:
            raise StartError(str(exc)) from exc
        Path(record.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        progress_dir = Path(progress_file(record)).parent
        accounts.give(progress_dir, account)
        labels = {
            LABEL_JOB: str(assignment.job_id),
            LABEL_ATTEMPT: str(assignment.attempt),
            LABEL_NODE: self.node_name,
        }
        if assignment.name:
            labels["schedulearn.name"] = assignment.name
        if assignment.user:
            labels["schedulearn.user"] = assignment.user
        environment = dict(plan.env)
        if self.init:
            # Docker's init (tini) then signals the job's process group, not
            # only its first process; other inits ignore the variable.
            environment["TINI_KILL_PROCESS_GROUP"] = "1"
        options: dict[str, Any] = {
            "command": list(plan.argv),
            "environment": environment,
            "labels": labels,
            "name": container_name(self.node_name, assignment.job_id, assignment.attempt),
            "network_mode": self.network_mode,
            "volumes": {
                record.checkpoint_dir: {"bind": CONTAINER_CHECKPOINT_DIR, "mode": "rw"},
                str(progress_dir): {"bind": CONTAINER_PROGRESS_DIR, "mode": "rw"},
            },
            "init": self.init,
            "detach": True,
            "privileged": False,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            **_identity(account),
        }
        if assignment.workdir:
            options["working_dir"] = assignment.workdir
        if assignment.shm_size:
            options["shm_size"] = assignment.shm_size
        if assignment.cpus > 0:
            options["nano_cpus"] = int(assignment.cpus * 1e9)
        if assignment.memory_gb > 0:
            options["mem_limit"] = int(assignment.memory_gb * 1024**3)
            # Swap counts in the limit: a job cannot page out past it.
            options["memswap_limit"] = options["mem_limit"]
        if self.pids_max > 0:
            options["pids_limit"] = self.pids_max
        if self.ulimits:
            options["ulimits"] = [
                Ulimit(name=n, soft=s, hard=h) for n, (s, h) in self.ulimits.items()
            ]
        if self.device_requests and assignment.gpus:
            options["device_requests"] = [
                DeviceRequest(device_ids=[str(g) for g in assignment.gpus], capabilities=[["gpu"]])
            ]
        image = assignment.image
        try:
            container = await _threaded(
                lambda: self._create(image, options, self.group_init), "docker-create"
            )
        except docker.errors.DockerException as exc:
            raise StartError(f"the container engine on {self.node_name!r} failed: {exc}") from exc
        record.container_id = container.id
        return ContainerHandle(self.client, record, container.id)

    def _create(self, image: str, options: dict[str, Any], group_init: bool = False) -> Any:
        client = self.client
        try:
            found = client.images.get(image)
        except docker.errors.ImageNotFound:
            try:
                found = client.images.pull(image)
            except docker.errors.DockerException as exc:
                raise StartError(
                    f"image {image!r} is not on node {self.node_name!r} and could not be "
                    f"pulled ({exc}); push it to a registry the node can reach, or load it "
                    "there with `docker load`"
                ) from exc
        if group_init:
            # The image's entrypoint still runs, behind a second init that
            # signals the process group (see the module docstring).
            entrypoint = (found.attrs.get("Config") or {}).get("Entrypoint") or []
            options = {**options, "entrypoint": [PODMAN_INIT, "-g", "--", *entrypoint]}
        # A container of this very run left by an agent that crashed while
        # starting it: it never reported, so it is safe to replace.
        with contextlib.suppress(docker.errors.NotFound):
            client.containers.get(options["name"]).remove(force=True)
        try:
            container = client.containers.create(image, **options)
        except docker.errors.APIError as exc:
            raise StartError(self._refused(exc)) from exc
        try:
            container.start()
        except docker.errors.APIError as exc:
            # Created but not started: nothing of it must stay behind.
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
            raise StartError(self._refused(exc)) from exc
        return container

    def _refused(self, exc: docker.errors.APIError) -> str:
        reason = str(exc.explanation or exc)
        hint = ""
        if "init" in reason:
            hint = (
                "; install the engine's init (tini for Docker, catatonit for Podman) "
                "or start the agent with --no-container-init"
            )
        elif "device driver" in reason or "nvidia" in reason.lower():
            hint = (
                "; this engine cannot hand out GPUs: install the NVIDIA Container Toolkit, "
                "or start the agent with --gpu-mode env"
            )
        return f"the container engine on {self.node_name!r} refused the job: {reason}{hint}"

    # --- recover ---------------------------------------------------------------

    async def recover(
        self, records: list[JobRecord], new_record: NewRecord | None = None
    ) -> list[RunHandle]:
        found = await _threaded(self._labelled, "docker-list")
        handles: list[RunHandle] = []
        for record in records:
            if record.executor is not self.kind:
                continue
            container_id = found.pop((record.job_id, record.attempt), None)
            if container_id is None:
                status = (
                    ExitStatus(record.exit_code, record.exit_message)
                    if record.ended
                    else ExitStatus(None, "the job's container is gone from this node")
                )
                handles.append(ContainerHandle(self.client, record, None, status))
                continue
            record.container_id = container_id
            handles.append(ContainerHandle(self.client, record, container_id))
        if new_record is not None:
            for (job_id, attempt), container_id in sorted(found.items()):
                record = new_record(job_id, attempt, container_id)
                handles.append(ContainerHandle(self.client, record, container_id))
        return handles

    def _labelled(self) -> dict[tuple[int, int], str]:
        containers = self.client.containers.list(
            all=True, filters={"label": f"{LABEL_NODE}={self.node_name}"}
        )
        found = {}
        for c in containers:
            try:
                key = (int(c.labels[LABEL_JOB]), int(c.labels[LABEL_ATTEMPT]))
            except (KeyError, ValueError):
                continue
            found[key] = c.id
        return found

    async def close(self) -> None:
        self.client.close()


def _is_podman(client: docker.DockerClient) -> bool:
    """Whether the engine is Podman (its Docker-compatible API names itself so)."""
    try:
        components = client.version().get("Components") or []
    except docker.errors.DockerException:
        return False
    return any("podman" in str(c.get("Name", "")).lower() for c in components)


def _identity(account: Account | None) -> dict[str, Any]:
    """The container's user: the job's account, else a non-root agent's own user.

    A root agent that runs every job as itself keeps the image's own USER.
    """
    if account is not None:
        groups = [str(g) for g in account.groups if g != account.gid]
        return {"user": f"{account.uid}:{account.gid}", "group_add": groups}
    if os.geteuid() != 0:
        return {"user": f"{os.geteuid()}:{os.getegid()}"}
    return {}


class ContainerHandle:
    """One run of a job as a container."""

    def __init__(
        self,
        client: docker.DockerClient,
        record: JobRecord,
        container_id: str | None,
        ended: ExitStatus | None = None,
    ) -> None:
        self.client = client
        self.record = record
        self.container_id = container_id
        self._status = ended
        self._waiting: asyncio.Future[ExitStatus] | None = None

    def is_alive(self) -> bool:
        return self._status is None

    async def wait(self) -> ExitStatus:
        if self._status is None:
            if self._waiting is None:
                self._waiting = _threaded(self._wait_blocking, f"docker-wait-{self.record.job_id}")
            self._status = await asyncio.shield(self._waiting)
        return self._status

    def _wait_blocking(self) -> ExitStatus:
        assert self.container_id is not None
        for _ in range(1000):
            try:
                result = self.client.api.wait(self.container_id)
                return ExitStatus(int(result.get("StatusCode", -1)), self._oom_message())
            except docker.errors.NotFound:
                return ExitStatus(None, "the job's container was removed while it ran")
            except Exception as exc:  # the engine restarted or the socket broke
                log.warning("waiting for container %s: %s", self.container_id[:12], exc)
                time.sleep(1.0)
        return ExitStatus(None, "lost contact with the container engine")

    def _oom_message(self) -> str:
        """ "out of memory: limit 8 GB" when the engine says the OOM killer acted in the
        container (its own cgroup, limited by `mem_limit`), else ""."""
        assert self.container_id is not None
        try:
            info = self.client.api.inspect_container(self.container_id)
        except docker.errors.DockerException:
            return ""
        if not (info.get("State") or {}).get("OOMKilled"):
            return ""
        limit = int((info.get("HostConfig") or {}).get("Memory") or 0)
        if not limit:
            return "out of memory"
        return f"out of memory: limit {round(limit / 1024**3, 2):g} GB"

    async def stop(self, grace_seconds: float) -> None:
        if self._status is not None or self.container_id is None:
            return
        cid = self.container_id
        timeout = max(0, math.ceil(grace_seconds))

        def stop() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.stop(cid, timeout=timeout)

        await _threaded(stop, f"docker-stop-{self.record.job_id}")
        await self.wait()

    async def cleanup(self) -> None:
        if self.container_id is None:
            return
        cid = self.container_id

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(cid, force=True)

        try:
            await _threaded(remove, "docker-remove")
        except docker.errors.DockerException as exc:
            log.warning("could not remove container %s: %s", cid[:12], exc)

    async def pump_logs(self, sink: LineSink) -> None:
        if self.container_id is None:
            return
        loop = asyncio.get_running_loop()

        def deliver(lines: list[OutputLine]) -> None:
            for line in lines:
                sink(line)

        streams = [
            _threaded(
                lambda s=s: self._follow(s, loop, deliver),  # type: ignore[misc]  # mypy cannot infer a lambda default (it binds each stream)
                f"docker-logs-{self.record.job_id}-{s.value}",
            )
            for s in (LogStream.STDOUT, LogStream.STDERR)
        ]
        await asyncio.gather(*streams, return_exceptions=True)

    def _follow(
        self,
        stream: LogStream,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[OutputLine]], None],
    ) -> None:
        """Read one stream to its end, skipping lines already shipped."""
        assert self.container_id is not None
        cid = self.container_id
        which = {"stdout": stream is LogStream.STDOUT, "stderr": stream is LogStream.STDERR}
        skip = self.record.log_positions.get(stream.value, 0)
        count = 0
        buffer = b""

        def emit(lines: list[tuple[bytes, int]]) -> None:
            nonlocal count
            now = time.time()
            out = []
            for line, _ in lines:
                count += 1
                if count > skip:
                    out.append(OutputLine(stream, decode(line), now, count))
            if out:
                loop.call_soon_threadsafe(deliver, out)

        try:
            for chunk in self.client.api.logs(cid, stream=True, follow=True, **which):
                buffer += chunk
                lines = split_lines(buffer, final=False)
                if lines:
                    buffer = buffer[lines[-1][1] :]
                    emit(lines)
        except docker.errors.NotFound:
            return
        except Exception as exc:  # the engine went away mid-stream
            log.warning("following the output of container %s: %s", cid[:12], exc)
        emit(split_lines(buffer, final=True))
        # Catch up once the stream has ended: a follow stream may end before the
        # engine has stored the last output of a container that just exited.
        try:
            whole = self.client.api.logs(cid, stream=False, follow=False, **which)
        except Exception:
            return
        emit(split_lines(whole, final=True)[count:])


def build(config: AgentConfig) -> DockerExecutor:
    """The executor as `executors.registry` offers it; `StartError` when no engine answers."""
    return DockerExecutor(
        config.name,
        base_url=config.docker_url,
        network_mode=config.network_mode,
        gpu_mode=config.gpu_mode,
        init=config.container_init,
        ulimits=config.container_ulimits,
        node_env=config.job_env,
        pids_max=config.job_pids_max,
    )
