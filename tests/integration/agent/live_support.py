"""Helpers for the live preemption, checkpoint and progress tests: a server
process with chosen settings, and a small training script that uses the
runtime library (checkpoint every step, stop at a step boundary when
preempted, report progress)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from agent_support import AdminApi, ServerProc

from waiting import wait_until

TRAIN_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from schedulearn import runtime

    total = int(sys.argv[1])
    pause = float(sys.argv[2])
    pad = "x" * int(sys.argv[3])  # makes the checkpoint this much bigger
    state = runtime.load_checkpoint(default={"step": 0, "seen": []})
    gpus = os.environ.get("SCHEDULEARN_NUM_GPUS")
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"start step={state['step']} gpus={gpus} cuda={cuda} "
          f"world={runtime.world_size()}", flush=True)
    for step in range(state["step"], total):
        time.sleep(pause)
        state = {"step": step + 1, "seen": state["seen"] + [step], "pad": pad}
        runtime.save_checkpoint(state)
        runtime.report(
            step=step + 1, epoch=step // 10, loss=1.0 / (step + 1), accuracy=step / total
        )
        if runtime.should_stop():
            print(f"stopping at step={step + 1}", flush=True)
            sys.exit(0)
    assert state["seen"] == list(range(total)), "a step was skipped or repeated"
    print(f"done step={state['step']}", flush=True)
    """
)


def write_script(folder: Path) -> Path:
    path = folder / "train_steps.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def train_command(script: Path, total: int, pause: float, pad: int = 0) -> list[str]:
    return [sys.executable, str(script), str(total), str(pause), str(pad)]


def start_server(database_url: str, log_path: Path, **env: str) -> ServerProc:
    proc = ServerProc(database_url, log_path)
    proc.env.update(env)
    return proc.start_ready()


def set_policy(api: AdminApi, spec: str) -> None:
    r = api.http.put("/policy", json={"spec": spec})
    assert r.status_code == 200, r.text


def history(api: AdminApi, job_id: int) -> list[dict[str, Any]]:
    r = api.http.get(f"/jobs/{job_id}/history")
    assert r.status_code == 200, r.text
    return list(r.json()["transitions"])


def messages(api: AdminApi, job_id: int) -> str:
    return "\n".join(
        f"{t['from_state']}->{t['to_state']}: {t['message']}" for t in history(api, job_id)
    )


def wait_field(api: AdminApi, job_id: int, field: str, at_least: int, timeout: float) -> Any:
    return wait_until(
        lambda: (j := api.job(job_id))[field] >= at_least and j,
        timeout,
        f"job {job_id}'s {field} to reach {at_least}",
    )
