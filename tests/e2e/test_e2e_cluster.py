"""A server and two agents of 4 virtual GPUs, as real processes on 127.0.0.1."""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys

import httpx
from e2e_cluster import ADMIN, Cluster

from schedulearn.protocol import JobSpec
from waiting import wait_until

# Each job prints where it ran and when, from inside the job (E2E_NODE: the
# agent's name, set by e2e_cluster in every job's environment).
PROBE = (
    'echo "NODE=$E2E_NODE GPUS=$CUDA_VISIBLE_DEVICES N=$SCHEDULEARN_NUM_GPUS '
    'START=$(date +%s.%N)"; '
    "sleep {secs}; "
    'echo "NODE=$E2E_NODE END=$(date +%s.%N)"'
)


def test_fifty_mixed_jobs_finish_and_never_share_a_gpu(cluster: Cluster) -> None:
    rng = random.Random(7)
    ids: list[int] = []
    with cluster.client() as c:
        for i in range(50):
            gpus = rng.choice([1, 1, 1, 2, 2, 3, 4])
            secs = rng.choice([0.1, 0.3, 0.6, 1.0])
            spec = JobSpec(name=f"mix{i}", command=PROBE.format(secs=secs), gpus=gpus)
            ids += c.submit(spec).ids
            if i == 25:
                # Switch the policy mid-run: no restart, in force from the next pass.
                assert c.set_policy("srtf:preempt=false").spec == "srtf:preempt=false"
    jobs = cluster.wait_final(ids, timeout=180)
    assert {j.state for j in jobs.values()} == {"succeeded"}, {
        i: j.message for i, j in jobs.items() if j.state != "succeeded"
    }
    health = httpx.get(f"{cluster.server.url}/healthz").json()
    assert health["policy"] == "srtf:preempt=false"  # the loop runs the new policy
    intervals: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    gangs = 0
    for job_id, job in jobs.items():
        out = cluster.log_text(job_id)
        # One probe line per part: a gang (a job spread over both nodes) prints two.
        parts = re.findall(r"NODE=(\S+) GPUS=([\d,]*) N=(\d+) START=([\d.]+)", out)
        ends = dict(re.findall(r"NODE=(\S+) END=([\d.]+)", out))
        assert job.placement is not None
        assert len(parts) == len(ends) == len(job.placement), f"job {job_id} printed {out!r}"
        printed = {node: [int(g) for g in gpus.split(",") if g] for node, gpus, _n, _s in parts}
        assert printed == {n: list(g) for n, g in job.placement.items()}, (job_id, printed)
        # SCHEDULEARN_NUM_GPUS counts the GPUs this part sees.
        assert all(int(n) == len(g.split(",")) for _node, g, n, _s in parts)
        gangs += len(parts) > 1
        # Each part holds its node's GPUs from its start to its own end: a
        # gang frees a node's GPUs as its part there exits.
        for node, _gpus, _n, start in parts:
            for g in printed[node]:
                intervals.setdefault((node, g), []).append(
                    (float(start), float(ends[node]), job_id)
                )
        assert job.started_at is not None and job.ended_at is not None
    for (node, g), spans in intervals.items():
        spans.sort()
        for (_s1, e1, j1), (s2, _e2, j2) in itertools.pairwise(spans):
            assert e1 <= s2, f"jobs {j1} and {j2} both held GPU {g} of {node}"
    # The same from the server's records: on each GPU, one job's end precedes the
    # next start. The server records a job's start and end, not each part's, so a
    # gang's record spans its last part's end, past the GPUs its other parts freed
    # (a job may start there once that part has exited): after a gang the next
    # job's start is checked against the printed end of the gang's part instead.
    by_gpu: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    for job_id, job in jobs.items():
        assert job.placement and job.started_at and job.ended_at
        for node, held in job.placement.items():
            for g in held:
                by_gpu.setdefault((node, g), []).append((job.started_at, job.ended_at, job_id))
    for (node, g), spans in by_gpu.items():
        spans.sort()
        part_end = {j: e for _s, e, j in intervals[node, g]}
        for (_s1, e1, j1), (s2, _e2, j2) in itertools.pairwise(spans):
            if len(jobs[j1].placement or {}) > 1:
                e1 = part_end[j1]  # the gang's part on this node ended here
            assert e1 <= s2, f"server records jobs {j1} and {j2} on one GPU at once"
    assert len(intervals) == 8  # both nodes' GPUs were used


def test_policy_switch_takes_effect_without_restart(cluster: Cluster) -> None:
    with cluster.client() as c:
        a = c.submit(JobSpec(command="sleep 30", gpus=4)).ids[0]
        b = c.submit(JobSpec(command="sleep 30", gpus=3)).ids[0]
        cluster.pids_to_reap.update(())
        cluster.wait_state(a, {"running"})
        cluster.wait_state(b, {"running"})
        head = c.submit(JobSpec(command="true", gpus=8)).ids[0]
        small = c.submit(JobSpec(command="echo small", gpus=1, estimated_duration=5)).ids[0]
        cluster.settle()  # the scheduler has seen both and left them waiting
        assert c.job(small).state == "pending"  # FIFO: behind the 8-GPU head
        assert "1 job ahead" in (c.job(small).waiting_reason or "")
        c.set_policy("srtf:preempt=false")
        assert cluster.wait_state(small, {"succeeded"}, timeout=15).state == "succeeded"
        assert c.job(head).state == "pending"
        for j in (a, b, head):
            c.cancel(j)


def test_cancel_and_logs_follow_through_the_cli(cluster: Cluster) -> None:
    with cluster.client() as c:
        job_id = c.submit(
            JobSpec(command="for i in $(seq 1 600); do echo line $i; sleep 0.05; done", gpus=2)
        ).ids[0]
    follower = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli.main", "logs", "-f", str(job_id)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SCHEDULEARN_SERVER": cluster.server.url, "SCHEDULEARN_TOKEN": ADMIN},
    )  # fmt: skip
    assert follower.stdout is not None
    first = [follower.stdout.readline() for _ in range(5)]
    assert first == [f"line {i}\n" for i in range(1, 6)]
    result = cluster.cli("cancel", str(job_id))
    assert result.returncode == 0 and f"job {job_id}: cancelled" in result.stdout
    # Read on through the same buffered pipe: communicate() reads the raw pipe and
    # would skip the lines readline() has already buffered.
    rest = follower.stdout.read()
    assert follower.wait(timeout=30) == 1  # the job did not succeed
    assert follower.stderr is not None
    err = follower.stderr.read()
    assert f"job {job_id} cancelled" in err
    numbers = [int(x.split()[1]) for x in first + rest.splitlines() if x.startswith("line")]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) < 600

    # The GPUs are free again once the process is gone.
    def held() -> list[tuple[str, int]]:
        with cluster.client() as c:
            return [(n.name, g.index) for n in c.nodes().items for g in n.gpus if g.job_id]

    wait_until(held, 15, "the GPUs to be free after cancel", until=lambda gpus: not gpus)


def test_two_node_gang(cluster: Cluster) -> None:
    probe = (
        'echo "RANK=$NODE_RANK WORLD=$WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT '
        'GPUS=$CUDA_VISIBLE_DEVICES"'
    )
    with cluster.client() as c:
        job_id = c.submit(JobSpec(name="gang", command=probe, gpus=6)).ids[0]
    job = cluster.wait_final([job_id])[job_id]
    assert job.state == "succeeded", job.message
    assert job.placement is not None and sorted(len(g) for g in job.placement.values()) == [2, 4]
    lines = sorted(
        re.findall(r"RANK=(\d) WORLD=(\d) MASTER=(\S+) GPUS=([\d,]+)", cluster.log_text(job_id))
    )
    assert [(r, w) for r, w, _, _ in lines] == [("0", "2"), ("1", "2")]
    assert lines[0][2] == lines[1][2]  # one rendezvous address
    assert sorted(len(g.split(",")) for *_, g in lines) == [2, 4]


def test_submit_example_through_the_cli(cluster: Cluster) -> None:
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "examples", cluster.root / "examples")
    result = cluster.cli("submit", "-f", "examples/job.yaml", "--json", cwd=cluster.root)
    assert result.returncode == 0, result.stderr
    import json

    (job_id,) = json.loads(result.stdout)["ids"]
    result = cluster.cli(
        "submit",
        "--gpus",
        "1",
        "--",
        "python",
        "examples/train_toy.py",
        "--epochs",
        "2",
        cwd=cluster.root,
    )
    assert result.returncode == 0 and "submitted job" in result.stdout
    second = int(result.stdout.split()[-1])
    done = cluster.wait_final([job_id, second], timeout=60)
    assert {j.state for j in done.values()} == {"succeeded"}
    assert "epoch 8/8" in cluster.log_text(job_id) and "done" in cluster.log_text(second)
    listing = cluster.cli("jobs", "--json")
    assert {j["id"] for j in json.loads(listing.stdout)["items"]} >= {job_id, second}
