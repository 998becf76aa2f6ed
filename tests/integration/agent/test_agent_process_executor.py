"""The subprocess executor against real processes: output, exit codes, the
environment, process groups, cancel (SIGTERM, grace, SIGKILL), and
re-adoption by a new executor from the state records alone."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from schedulearn.agent.executors import process
from schedulearn.agent.executors.base import MAX_LINE_CHARS, OutputLine, RunHandle, StartError
from schedulearn.agent.executors.process import SubprocessExecutor
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Assignment, Executor, Launcher
from waiting import wait_until, wait_until_async

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state")


def new_record(store: StateStore, job_id: int, attempt: int = 1) -> JobRecord:
    record = JobRecord(
        job_id=job_id,
        attempt=attempt,
        executor=Executor.SUBPROCESS,
        job_dir=str(store.create_job_dir(job_id, attempt)),
        checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
        started_at=time.time(),
    )
    store.save(record)
    return record


def executor(**kw: Any) -> SubprocessExecutor:
    return SubprocessExecutor("node-a", **kw)


async def run_to_end(handle: RunHandle) -> tuple[int | None, list[OutputLine]]:
    lines: list[OutputLine] = []
    pump = asyncio.create_task(handle.pump_logs(lines.append))
    status = await handle.wait()
    await pump
    return status.exit_code, lines


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_job_runs_with_its_output_split_by_stream_and_its_exit_code(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(
            job_id=5,
            attempt=1,
            command="echo out1; echo err1 >&2; printf 'no newline'; exit 3",
            gpus=[1, 3],
        )
        handle = await executor().start(job, new_record(store, 5))
        code, lines = await run_to_end(handle)
        assert code == 3
        assert [(ln.stream.value, ln.text) for ln in lines if ln.stream.value == "stdout"] == [
            ("stdout", "out1"),
            ("stdout", "no newline"),
        ]
        assert [ln.text for ln in lines if ln.stream.value == "stderr"] == ["err1"]

    run(go())


def test_the_job_sees_its_environment_but_not_the_agents_secrets(store: StateStore) -> None:
    async def go() -> None:
        base = {
            **os.environ,
            "SCHEDULEARN_AGENT_TOKEN": "secret",
            "AWS_SECRET_ACCESS_KEY": "agent-only",
            "LC_ALL": "C.UTF-8",
        }
        job = Assignment(
            job_id=6,
            attempt=1,
            command="env | sort",
            gpus=[2],
            env={"MY_VAR": "x y"},
        )
        record = new_record(store, 6)
        handle = await executor(base_env=base).start(job, record)
        code, lines = await run_to_end(handle)
        env = dict(ln.text.split("=", 1) for ln in lines if "=" in ln.text)
        assert code == 0
        assert env["CUDA_VISIBLE_DEVICES"] == "2"
        assert env["SCHEDULEARN_JOB_ID"] == "6"
        assert env["SCHEDULEARN_NUM_GPUS"] == "1"
        assert env["SCHEDULEARN_CHECKPOINT_DIR"] == record.checkpoint_dir
        assert Path(record.checkpoint_dir).is_dir()
        assert env["MY_VAR"] == "x y"
        # Only the allowlist of the agent's own environment (the locale here).
        assert env["LC_ALL"] == "C.UTF-8"
        assert "AWS_SECRET_ACCESS_KEY" not in env
        assert "SCHEDULEARN_AGENT_TOKEN" not in env

    run(go())


def test_the_job_leads_its_own_session_and_process_group(store: StateStore) -> None:
    async def go() -> None:
        probe = "import os; print(os.getpgid(0), os.getsid(0))"
        job = Assignment(job_id=7, attempt=1, command=[sys.executable, "-c", probe])
        record = new_record(store, 7)
        handle = await executor().start(job, record)
        code, lines = await run_to_end(handle)
        pgid, sid = map(int, lines[0].text.split())
        assert code == 0
        assert pgid == sid == record.pid
        assert pgid != os.getpgid(0)

    run(go())


def test_workdir_is_used_and_a_missing_one_is_refused(store: StateStore, tmp_path: Path) -> None:
    async def go() -> None:
        job = Assignment(job_id=8, attempt=1, command="pwd", workdir=str(tmp_path))
        code, lines = await run_to_end(await executor().start(job, new_record(store, 8)))
        assert (code, [ln.text for ln in lines]) == (0, [str(tmp_path)])
        missing = Assignment(job_id=9, attempt=1, command="pwd", workdir="/no/such/dir")
        with pytest.raises(StartError, match="does not exist on node 'node-a'"):
            await executor().start(missing, new_record(store, 9))

    run(go())


def test_an_unknown_program_is_refused_with_what_to_change(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=10, attempt=1, command=["no-such-program-xyz", "--flag"])
        with pytest.raises(StartError, match="'no-such-program-xyz' was not found"):
            await executor().start(job, new_record(store, 10))
        torch = Assignment(job_id=11, attempt=1, command=["train.py"], launcher=Launcher.TORCHRUN)
        with pytest.raises(StartError, match="'torchrun' was not found"):
            # A job PATH without this environment's bin (where CI's torch wheel puts torchrun).
            await executor(path="/usr/bin:/bin").start(torch, new_record(store, 11))

    run(go())


def test_a_program_is_looked_up_again_unless_found_within_the_memo(
    store: StateStore, tmp_path: Path
) -> None:
    """Only a program found is remembered, and only for FOUND_SECONDS: one
    installed after a refusal is found at once, and one removed is refused
    again once the memo lapses (the clock is moved on, not waited for)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "made-later"
    ex = executor(path=f"{bin_dir}:/usr/bin:/bin")
    now = [1000.0]
    ex.programs = process.ProgramMemo(clock=lambda: now[0])
    job = Assignment(job_id=40, attempt=1, command=["made-later"])

    async def go() -> None:
        with pytest.raises(StartError, match="'made-later' was not found"):
            await ex.start(job, new_record(store, 40))
        tool.write_text("#!/bin/sh\necho made\n")
        tool.chmod(0o755)
        code, lines = await run_to_end(await ex.start(job, new_record(store, 41)))
        assert (code, [ln.text for ln in lines]) == (0, ["made"])
        tool.unlink()
        now[0] += process.FOUND_SECONDS - 1  # still remembered: the shim's sh says it
        code, _ = await run_to_end(await ex.start(job, new_record(store, 42)))
        assert code == 127
        now[0] += 2
        with pytest.raises(StartError, match="'made-later' was not found"):
            await ex.start(job, new_record(store, 43))

    run(go())


def test_cancel_sends_sigterm_and_the_job_can_exit_cleanly(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(
            job_id=12,
            attempt=1,
            command="trap 'echo saving checkpoint; exit 0' TERM; echo ready; "
            "while true; do sleep 0.05; done",
        )
        handle = await executor().start(job, new_record(store, 12))
        lines: list[OutputLine] = []
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        await wait_for_line(lines, "ready")
        await handle.stop(grace_seconds=10)
        status = await handle.wait()
        await pump
        assert status.exit_code == 0
        # (sh may also print "Terminated" for its `sleep`, which got SIGTERM too.)
        assert [ln.text for ln in lines][:1] == ["ready"]
        assert "saving checkpoint" in [ln.text for ln in lines]

    run(go())


def test_cancel_kills_a_job_that_ignores_sigterm_after_the_grace(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=13, attempt=1, command="trap '' TERM; echo ready; sleep 60")
        handle = await executor().start(job, new_record(store, 13))
        lines: list[OutputLine] = []
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        await wait_for_line(lines, "ready")
        began = time.monotonic()
        await handle.stop(grace_seconds=0.5)
        took = time.monotonic() - began
        status = await handle.wait()
        await pump
        assert status.exit_code == 128 + signal.SIGKILL
        assert took >= 0.5

    run(go())


def test_cancel_stops_the_whole_process_group(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=14, attempt=1, command="sleep 60 & echo child $!; sleep 60 & wait")
        handle = await executor().start(job, new_record(store, 14))
        lines: list[OutputLine] = []
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        line = await wait_for_line(lines, "child")
        child = int(line.split()[1])
        assert alive(child)
        await handle.stop(grace_seconds=2)
        await pump
        assert (await handle.wait()).exit_code == 128 + signal.SIGTERM
        wait_until(lambda: not alive(child), 5, "the job's child to die")

    run(go())


def test_processes_a_finished_job_left_behind_are_killed(store: StateStore) -> None:
    async def go() -> None:
        # The job backgrounds a process that would hold its GPUs, and exits.
        job = Assignment(
            job_id=15, attempt=1, command="sh -c 'trap \"\" HUP; sleep 60' & echo stray $!"
        )
        handle = await executor().start(job, new_record(store, 15))
        code, lines = await run_to_end(handle)
        stray = int(lines[0].text.split()[1])
        assert code == 0
        wait_until(lambda: not alive(stray), 5, "the stray process to be killed")

    run(go())


def test_binary_output_arrives_as_valid_text(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=17, attempt=1, command=r"printf 'a\000b\377c\n'")
        code, lines = await run_to_end(await executor().start(job, new_record(store, 17)))
        assert (code, [ln.text for ln in lines]) == (0, ["a\ufffdb\ufffdc"])

    run(go())


def test_long_lines_are_cut_and_nothing_is_lost(store: StateStore) -> None:
    async def go() -> None:
        size = MAX_LINE_CHARS * 2 + 10
        job = Assignment(
            job_id=16,
            attempt=1,
            command=[sys.executable, "-c", f"print('x' * {size}); print('end')"],
        )
        code, lines = await run_to_end(await executor().start(job, new_record(store, 16)))
        texts = [ln.text for ln in lines]
        assert code == 0
        assert "".join(texts[:-1]) == "x" * size
        assert max(len(t) for t in texts) == MAX_LINE_CHARS
        assert texts[-1] == "end"

    run(go())


# --- re-adoption ---------------------------------------------------------------


def test_a_new_executor_readopts_a_running_job_and_resumes_its_log(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(
            job_id=20,
            attempt=3,
            command="echo first; echo second; read _ < fifo; echo third; exit 4",
            workdir=str(store.root),
        )
        os.mkfifo(store.root / "fifo")
        record = new_record(store, 20, attempt=3)
        first = await executor().start(job, record)
        store.save(record)
        seen: list[OutputLine] = []
        pump = asyncio.create_task(first.pump_logs(seen.append))
        await wait_for_line(seen, "second")
        pump.cancel()  # the agent process goes away; the job does not
        # As if the server had acknowledged "first" only.
        record.log_positions = {"stdout": seen[0].position}
        store.save(record)

        (loaded,) = StateStore(store.root).load_all()
        (adopted,) = await executor().recover([loaded])
        assert adopted.is_alive()
        lines: list[OutputLine] = []
        resumed = asyncio.create_task(adopted.pump_logs(lines.append))
        await wait_for_line(lines, "second")
        with open(store.root / "fifo", "w") as fifo:
            fifo.write("go\n")
        status = await adopted.wait()
        await resumed
        assert status.exit_code == 4
        assert [ln.text for ln in lines] == ["second", "third"]

    run(go())


def test_an_exit_while_the_agent_was_away_is_read_from_the_exit_file(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=21, attempt=1, command="echo done; exit 7")
        record = new_record(store, 21)
        await executor().start(job, record)
        store.save(record)
        wait_until(lambda: (Path(record.job_dir) / "exit_code").exists(), 5, "the job to end")
        (adopted,) = await executor().recover(StateStore(store.root).load_all())
        code, lines = await run_to_end(adopted)
        assert code == 7
        assert [ln.text for ln in lines] == ["done"]

    run(go())


def test_a_job_killed_while_the_agent_was_away_has_an_unknown_exit(store: StateStore) -> None:
    async def go() -> None:
        job = Assignment(job_id=22, attempt=1, command="sleep 60")
        record = new_record(store, 22)
        await executor().start(job, record)
        store.save(record)
        assert record.pid is not None
        os.killpg(record.pid, signal.SIGKILL)  # the OOM killer, say
        (adopted,) = await executor().recover(StateStore(store.root).load_all())
        status = await adopted.wait()
        assert status.exit_code is None
        assert "SIGKILL" in status.message

    run(go())


def test_a_reused_pid_is_not_mistaken_for_the_job(store: StateStore) -> None:
    async def go() -> None:
        record = new_record(store, 23)
        # Our own pid: a process that took the job's pid after the job ended.
        record.pid = os.getpid()
        (adopted,) = await executor().recover([record])
        assert not adopted.is_alive()
        await adopted.stop(grace_seconds=0.1)  # must not signal the test process
        assert (await adopted.wait()).exit_code is None

    run(go())


def test_an_ended_record_is_reported_again_as_it_was(store: StateStore) -> None:
    async def go() -> None:
        record = new_record(store, 24)
        record.exit_code, record.exit_message, record.ended_at = 9, "why", time.time()
        (adopted,) = await executor().recover([record])
        status = await adopted.wait()
        assert (status.exit_code, status.message) == (9, "why")

    run(go())


async def wait_for_line(lines: list[OutputLine], prefix: str, timeout: float = 10.0) -> str:
    found = await wait_until_async(
        lambda: [ln.text for ln in lines],
        timeout,
        f"a line starting {prefix!r}",
        until=lambda texts: any(t.startswith(prefix) for t in texts),
    )
    return next(t for t in found if t.startswith(prefix))
