"""Issue 5, done-when 4: a job migrates from one agent to another, its checkpoint
carried by the server (the agents share no path), and finishes correctly: with
the weights of a run that was never moved. Real server and agent processes."""

from __future__ import annotations

from pathlib import Path

from live_examples import (
    CKPT_DIR,
    RESUMED,
    check_turns,
    digest_of,
    digits_command,
    history,
    live_cluster,
    move_to_the_other_agent_mid_epoch,
    reference_digest,
)

from schedulearn.protocol import JobSpec

ARGS = ("--epochs", "8", "--seed", "11")


def test_a_job_moved_to_another_agent_resumes_from_the_servers_copy(tmp_path: Path) -> None:
    expected = reference_digest(tmp_path, *ARGS)
    # No SCHEDULEARN_CHECKPOINT_DIR on the server: no shared checkpoint path.
    store = tmp_path / "server-checkpoints"
    server_env = {"SCHEDULEARN_CHECKPOINT_STORE_DIR": str(store)}
    with live_cluster(tmp_path, {"a": 1, "b": 1}, **server_env) as cluster:
        with cluster.client() as c:
            job_id = c.submit(
                JobSpec(
                    name="mover",
                    command=digits_command(*ARGS, "--sleep-per-step", "0.02"),
                    gpus=1,
                    preemptible=True,
                )
            ).ids[0]
        target = move_to_the_other_agent_mid_epoch(cluster, job_id, timeout=60)
        (source,) = set(cluster.agents) - {target}
        done = cluster.wait_final([job_id], timeout=120)[job_id]
        steps = history(cluster, job_id)
        assert done.state == "succeeded", f"{done.message}\n{steps}"
        assert done.placement == {target: [0]}
        assert done.migrations == 1 and done.preemptions == 0 and done.resizes == 0, steps
        assert f"migrating from {source}:0 to {target}:0" in steps, steps
        assert "checkpoint of attempt 1 saved on the server" in steps, steps
        assert any(store.rglob("*")), "the server's checkpoint store is empty"

        log = cluster.log_text(job_id)
        # Two attempts, each in its own agent's checkpoint directory: nothing shared.
        first_dir, second_dir = CKPT_DIR.findall(log)
        assert first_dir != second_dir
        assert Path(first_dir).is_relative_to(tmp_path / f"state-{source}"), first_dir
        assert Path(second_dir).is_relative_to(tmp_path / f"state-{target}"), second_dir
        # One resume, from exactly the state the first attempt saved last: the
        # step it stopped at, or the epoch it had just ended when the stop came
        # at an epoch's end (a loaded machine's timing decides which).
        check_turns(log, preemptions=1)
        (resumed,) = RESUMED.findall(log)
        assert int(resumed[0]) >= 1, log
        assert digest_of(log) == expected
