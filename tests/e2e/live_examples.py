"""Shared by the live acceptance tests (tests/e2e/test_live_*.py): a cluster of
real server and agent processes shaped per test, the example training
scripts as job commands, and what their output says (digest, resumes,
world sizes)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
from e2e_cluster import ADMIN, Cluster

from schedulearn.protocol import JobPublic
from waiting import Timeout, wait_until

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "train_digits.py"
DIGEST = re.compile(r"final weights sha256 ([0-9a-f]{64})")
RESUMED = re.compile(r"resumed from epoch (\d+) \(step (\d+), (\d+) samples into the epoch\)")
STOPPED = re.compile(r"stop requested: saved epoch (\d+) step (\d+)")
WORLD = re.compile(
    r"world size (\d+): global batch (\d+) \((\d+) per worker\), learning rate (\S+)"
)
CKPT_DIR = re.compile(r"checkpoint directory (\S+)")
# Mid-epoch: "saved epoch 2 step 241"; between epochs: "saved epoch 3; exiting".
STOPPED_ANYWHERE = re.compile(r"stop requested: saved epoch (\d+)(?: step (\d+))?")
# The script saves at the end of every epoch, then prints this line.
EPOCH_SAVED = re.compile(r"epoch (\d+)/\d+ loss=\S+ accuracy=\S+ step=(\d+)")

T = TypeVar("T")


def digits_command(*args: str) -> list[str]:
    """The NumPy digits example as a job's argv, run by this test's interpreter."""
    return [sys.executable, str(DIGITS), *args]


def reference_digest(tmp: Path, *args: str) -> str:
    """The final weights of an uninterrupted run outside Schedulearn (no sleeping needed:
    `--sleep-per-step` does not change the weights)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env["SCHEDULEARN_CHECKPOINT_DIR"] = str(tmp / "reference-checkpoint")
    out = subprocess.run(
        digits_command(*args, "--sleep-per-step", "0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return digest_of(out)


def digest_of(text: str) -> str:
    match = DIGEST.search(text)
    assert match, f"no 'final weights sha256' line in:\n{text[-3000:]}"
    return match.group(1)


@contextlib.contextmanager
def live_cluster(root: Path, agents: dict[str, int], **server_env: str) -> Iterator[Cluster]:
    """A server with `server_env` (SCHEDULEARN_* settings) and one agent per entry
    (name -> virtual GPUs). No shared checkpoint path: each agent keeps its own,
    and checkpoints travel through the server."""
    cluster = Cluster(root, server_env={"SCHEDULEARN_TICK_SECONDS": "0.5", **server_env})
    try:
        cluster.start()
        # /healthz answers before the app has loaded; on a loaded machine loading
        # takes longer than the enrollment call's own timeout: wait for it here.
        httpx.get(
            f"{cluster.server.url}/api/v1/nodes",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=120,
        ).raise_for_status()
        for name, gpus in agents.items():
            cluster.add_agent(name, gpus=gpus)
        cluster.wait_nodes(len(agents))
        yield cluster
    finally:
        cluster.stop()


def wait_for(what: str, probe: Callable[[], T | None], cluster: Cluster, timeout: float) -> T:
    """Poll `probe` until it returns something truthy; on timeout say what and show the logs."""
    try:
        return wait_until(probe, timeout, what)
    except Timeout as exc:
        raise Timeout(f"{exc}\n{cluster.logs()}") from None


def job(cluster: Cluster, job_id: int) -> JobPublic:
    with cluster.client() as c:
        return c.job(job_id)


def history(cluster: Cluster, job_id: int) -> str:
    """A job's state changes, one `from->to: message` per line."""
    with cluster.client() as c:
        steps = c.history(job_id).transitions
    return "\n".join(f"{t.from_state.value}->{t.to_state.value}: {t.message}" for t in steps)


def move_to_the_other_agent_mid_epoch(cluster: Cluster, job_id: int, timeout: float) -> str:
    """Once the running job has reported an epoch, move it (admin API) to the same
    GPU indices on the other of the cluster's two agents; returns where it went."""
    running = cluster.wait_state(job_id, {"running"}, timeout=60)
    assert running.placement is not None
    ((source, gpus),) = running.placement.items()
    (target,) = set(cluster.agents) - {source}
    wait_for(
        "an epoch's progress",
        lambda: (p := job(cluster, job_id).progress) and (p.epoch or 0) >= 1,
        cluster,
        timeout=timeout,
    )
    time.sleep(0.5)  # into the middle of the next epoch
    moved = httpx.post(
        f"{cluster.server.url}/api/v1/jobs/{job_id}/move",
        json={"placement": {target: list(range(len(gpus)))}},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=30,
    )
    assert moved.status_code == 200, moved.text
    return target


def check_turns(log: str, preemptions: int) -> int:
    """Every preemption of a run left a resume, and every resume restored
    exactly the newest state the run had saved (the epoch and step of the
    stop the script saw, or of the last epoch it ended, when its turn ended
    before it could see the stop: before its start-up had installed the
    handler, as a loaded machine's imports can take longer than a quantum).
    Returns the stops.

    The one turn that may resume from an older state is one that ended
    after the last epoch, while the script printed its result: it exits 0,
    finished, but an exit while preempting is taken as saved-and-stopped
    (a script may well exit 0 after saving), so the job runs once more
    from the newest checkpoint the server holds, with the same weights."""
    found = [
        (m.start(), kind, m)
        for kind, pattern in (
            ("stop", STOPPED_ANYWHERE),
            ("resume", RESUMED),
            ("epoch", EPOCH_SAVED),
            ("final", DIGEST),
        )
        for m in pattern.finditer(log)
    ]
    saved: tuple[str, str] | None = None  # (epoch, step) of the newest save
    stops = resumes = after_the_end = 0
    finished = False
    for _, kind, m in sorted(found, key=lambda event: event[0]):
        if kind == "epoch":
            saved = (m.group(1), m.group(2))
        elif kind == "stop":
            stops += 1
            if m.group(2):
                saved = (m.group(1), m.group(2))
            else:  # between epochs: the epoch line just before it named the step
                assert saved is not None and saved[0] == m.group(1), log
        elif kind == "final":
            finished = True
        else:
            resumes += 1
            if finished:  # from the end, or from the last stop's state
                after_the_end += 1
                finished = False
            else:
                assert (m.group(1), m.group(2)) == saved, log
            saved = (m.group(1), m.group(2))
    assert resumes == preemptions, log
    assert after_the_end <= 1, log
    return stops
