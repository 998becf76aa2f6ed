"""The Docker executor against real engines: Docker (started by the test
set-up) and Podman's Docker-compatible socket, with a locally built
busybox image. Run, logs, environment, labels, volumes, cancel (the
program of a string command gets the signal on both engines), and
re-adoption by a new executor (from records, and from labels alone)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import docker
import pytest

from schedulearn.agent.executors.base import OutputLine, RunHandle, StartError
from schedulearn.agent.executors.container import DockerExecutor
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Assignment, Executor
from waiting import wait_until_async

pytestmark = pytest.mark.docker
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(params=["docker", "podman"])
def engine_url(request: pytest.FixtureRequest, docker_image: str) -> str | None:
    """None: Docker's default socket; else Podman's socket."""
    if request.param == "docker":
        return None
    return str(request.getfixturevalue("podman_url"))


@pytest.fixture
def node_name(request: pytest.FixtureRequest) -> str:
    # Unique per test, so label searches never see another test's containers.
    return f"dx-{abs(hash(request.node.nodeid)) % 10**8}"


@pytest.fixture
def executor(engine_url: str | None, node_name: str) -> Iterator[DockerExecutor]:
    ex = DockerExecutor(node_name, base_url=engine_url)
    try:
        yield ex
    finally:
        for c in ex.client.containers.list(
            all=True, filters={"label": f"schedulearn.node={node_name}"}
        ):
            c.remove(force=True)
        ex.client.close()


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state")


def new_record(store: StateStore, job_id: int, attempt: int = 1) -> JobRecord:
    record = JobRecord(
        job_id=job_id,
        attempt=attempt,
        executor=Executor.DOCKER,
        job_dir=str(store.create_job_dir(job_id, attempt)),
        checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
        started_at=time.time(),
    )
    store.save(record)
    return record


def job(docker_image: str, job_id: int, command: str | list[str], **kw: Any) -> Assignment:
    return Assignment(
        job_id=job_id,
        attempt=1,
        image=docker_image,
        executor=Executor.DOCKER,
        command=command,
        **kw,
    )


async def run_to_end(handle: RunHandle) -> tuple[int | None, list[OutputLine]]:
    lines: list[OutputLine] = []
    pump = asyncio.create_task(handle.pump_logs(lines.append))
    status = await handle.wait()
    await asyncio.wait_for(pump, 30)
    return status.exit_code, lines


async def wait_for_line(lines: list[OutputLine], text: str, timeout: float = 20.0) -> None:
    await wait_until_async(
        lambda: [ln.text for ln in lines], timeout, f"the line {text!r}", until=lambda t: text in t
    )


def texts(lines: list[OutputLine], stream: str) -> list[str]:
    return [ln.text for ln in lines if ln.stream.value == stream]


def test_a_container_job_runs_with_its_output_env_labels_and_volume(
    executor: DockerExecutor, store: StateStore, docker_image: str, node_name: str
) -> None:
    async def go() -> None:
        script = (
            "echo gpus=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES "
            "id=$SCHEDULEARN_JOB_ID n=$SCHEDULEARN_NUM_GPUS ckpt=$SCHEDULEARN_CHECKPOINT_DIR "
            "mine=$MINE; echo oops >&2; echo saved > $SCHEDULEARN_CHECKPOINT_DIR/state; "
            "df -k /dev/shm | tail -1; exit 6"
        )
        record = new_record(store, 31)
        handle = await executor.start(
            job(docker_image, 31, script, gpus=[1, 2], env={"MINE": "v"}, shm_size="64m"),
            record,
        )
        container = executor.client.containers.get(record.container_id)
        code, lines = await run_to_end(handle)
        assert code == 6
        out = texts(lines, "stdout")
        assert out[0] == ("gpus=1,2 nvidia=1,2 id=31 n=2 ckpt=/schedulearn/checkpoint mine=v")
        assert out[1].split()[1] == "65536"  # a 64 MiB /dev/shm, in KiB
        assert texts(lines, "stderr") == ["oops"]
        assert (Path(record.checkpoint_dir) / "state").read_text() == "saved\n"
        container.reload()
        labels = container.labels
        assert labels["schedulearn.job"] == "31"
        assert labels["schedulearn.attempt"] == "1"
        assert labels["schedulearn.node"] == node_name
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
        await handle.cleanup()
        with pytest.raises(docker.errors.NotFound):
            executor.client.containers.get(record.container_id)

    run(go())


def test_cancel_gives_the_container_its_sigterm_then_kills_it_after_the_grace(
    executor: DockerExecutor, store: StateStore, docker_image: str
) -> None:
    async def go() -> None:
        polite = await executor.start(
            job(
                docker_image,
                32,
                "trap 'echo checkpointing; exit 0' TERM; echo ready; "
                "while true; do sleep 0.1; done",
            ),
            new_record(store, 32),
        )
        lines: list[OutputLine] = []
        pump = asyncio.create_task(polite.pump_logs(lines.append))
        await wait_for_line(lines, "ready")
        await polite.stop(grace_seconds=10)
        await pump
        assert (await polite.wait()).exit_code == 0
        assert "checkpointing" in texts(lines, "stdout")

        stubborn = await executor.start(
            job(docker_image, 33, "trap '' TERM; echo ready; sleep 60"), new_record(store, 33)
        )
        lines = []
        pump = asyncio.create_task(stubborn.pump_logs(lines.append))
        await wait_for_line(lines, "ready")
        began = time.monotonic()
        await stubborn.stop(grace_seconds=1)
        await pump
        assert (await stubborn.wait()).exit_code == 137
        assert time.monotonic() - began >= 1

    run(go())


def test_the_program_of_a_string_command_gets_the_stop_signal_itself(
    executor: DockerExecutor, store: StateStore, docker_image: str
) -> None:
    """A string command runs under a shell; the program that shell runs (here
    a second shell) must get SIGTERM too, or it never saves: Docker's init
    signals the process group, and so does the second init the executor puts
    in front on Podman, whose own init signals one process only."""

    async def go() -> None:
        program = (
            "trap 'echo program saved; exit 0' TERM; echo ready; while true; do sleep 0.1; done"
        )
        handle = await executor.start(
            job(docker_image, 34, f'sh -c "{program}"'), new_record(store, 34)
        )
        lines: list[OutputLine] = []
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        await wait_for_line(lines, "ready")
        # A long grace: without the signal the program would be killed at its end.
        await handle.stop(grace_seconds=60)
        await pump
        assert "program saved" in texts(lines, "stdout")
        # The command's shell then stops as a shell killed by SIGTERM would.
        assert (await handle.wait()).exit_code == 143

    run(go())


def test_a_new_executor_readopts_a_running_container_and_resumes_its_log(
    executor: DockerExecutor,
    store: StateStore,
    docker_image: str,
    engine_url: str | None,
    node_name: str,
) -> None:
    async def go() -> None:
        gate = Path(store.default_checkpoint_dir(34)) / "go"
        record = new_record(store, 34)
        await executor.start(
            job(
                docker_image,
                34,
                "echo one; echo two; while [ ! -e /schedulearn/checkpoint/go ]; do sleep 0.1; "
                "done; echo three; exit 2",
            ),
            record,
        )
        store.save(record)
        # The first agent process shipped "one" and then went away.
        record.log_positions = {"stdout": 1}
        store.save(record)

        again = DockerExecutor(node_name, base_url=engine_url)
        (adopted,) = await again.recover(StateStore(store.root).load_all())
        assert adopted.is_alive()
        lines: list[OutputLine] = []
        pump = asyncio.create_task(adopted.pump_logs(lines.append))
        await wait_for_line(lines, "two")
        gate.touch()
        assert (await adopted.wait()).exit_code == 2
        await asyncio.wait_for(pump, 30)
        assert texts(lines, "stdout") == ["two", "three"]
        again.client.close()

    run(go())


def test_containers_are_found_by_their_labels_without_a_record(
    executor: DockerExecutor,
    store: StateStore,
    docker_image: str,
    engine_url: str | None,
    node_name: str,
) -> None:
    async def go() -> None:
        record = new_record(store, 35, attempt=4)
        await executor.start(
            Assignment(
                job_id=35, attempt=4, image=docker_image, command="echo hi; sleep 0.5; exit 1"
            ),
            record,
        )
        made: list[tuple[int, int, str]] = []

        def new(job_id: int, attempt: int, container_id: str) -> JobRecord:
            made.append((job_id, attempt, container_id))
            return new_record(store, job_id, attempt)

        again = DockerExecutor(node_name, base_url=engine_url)
        (found,) = await again.recover([], new)
        assert made == [(35, 4, record.container_id)]
        code, lines = await run_to_end(found)
        assert code == 1
        assert texts(lines, "stdout") == ["hi"]
        again.client.close()

    run(go())


def test_a_missing_image_or_no_image_is_refused_with_what_to_change(
    executor: DockerExecutor, store: StateStore
) -> None:
    async def go() -> None:
        missing = Assignment(job_id=36, attempt=1, image="no-such-image:never", command="true")
        with pytest.raises(StartError, match="docker load"):
            await executor.start(missing, new_record(store, 36))
        no_image = Assignment(job_id=37, attempt=1, command="true", executor=Executor.DOCKER)
        with pytest.raises(StartError, match="give the job an image"):
            await executor.start(no_image, new_record(store, 37))

    run(go())


def test_gpus_go_as_device_requests_and_an_engine_without_them_says_what_to_change(
    docker_image: str, store: StateStore, node_name: str
) -> None:
    async def go() -> None:
        ex = DockerExecutor(node_name, gpu_mode="device-requests")
        try:
            if "nvidia" in (ex.client.info().get("Runtimes") or {}):
                pytest.skip("this engine has the NVIDIA runtime")
            with pytest.raises(StartError, match="--gpu-mode env"):
                await ex.start(job(docker_image, 38, "true", gpus=[0, 2]), new_record(store, 38))
            # The refused container was removed, not left behind.
            left = ex.client.containers.list(
                all=True, filters={"label": f"schedulearn.node={node_name}"}
            )
            assert left == []
        finally:
            ex.client.close()

    run(go())


def test_a_container_gets_the_runs_limits_and_an_oom_ends_with_its_reason(
    engine_url: str | None, node_name: str, store: StateStore, docker_image: str
) -> None:
    """Containers keep the engine's cgroup, with the limits a process run gets
    (issue 33): CPU quota, memory (swap included), pids; and the OOM reason."""
    executor = DockerExecutor(node_name, base_url=engine_url, pids_max=50)
    try:
        # The OOM is tried on Docker only: Podman's Docker-compatible API does not say
        # OOMKilled here (cgroup v1; its OOM ends as a plain 137, docs/security.md), and
        # its conmon drops an `oom` file in the working directory of its service.
        on_docker = engine_url is None

        async def go() -> None:
            # `dd` reads into a 256 MiB buffer: over a 64 MiB limit.
            command = "dd if=/dev/zero of=/dev/null bs=256M count=1" if on_docker else "true"
            hog = job(docker_image, 41, command, cpus=0.5, memory_gb=0.0625)
            handle = await executor.start(hog, new_record(store, 41))
            assert handle.record.container_id is not None
            host = executor.client.api.inspect_container(handle.record.container_id)["HostConfig"]
            assert host["NanoCpus"] == 500_000_000
            assert host["Memory"] == host["MemorySwap"] == 64 * 1024**2
            assert host["PidsLimit"] == 50
            status = await handle.wait()
            if not on_docker:
                return
            assert status.exit_code == 137
            assert status.message == "out of memory: limit 0.06 GB"
            # Within its limit the same job is no OOM.
            fits = job(docker_image, 42, "dd if=/dev/zero of=/dev/null bs=16M count=1")
            status = await (await executor.start(fits, new_record(store, 42))).wait()
            assert (status.exit_code, status.message) == (0, "")

        run(go())
    finally:
        for c in executor.client.containers.list(
            all=True, filters={"label": f"schedulearn.node={node_name}"}
        ):
            c.remove(force=True)
        executor.client.close()
