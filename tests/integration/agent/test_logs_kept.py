"""Job output is never lost silently, and one job cannot fill the database.

Real server and agent processes on 127.0.0.1, the real CLI:
- a job printing 100,000 lines (3 MB, three times the server's stored cap)
  keeps every line: `schedulearn logs --full` prints exactly what the job
  printed (the job's own checksum), while the server's stored copy stays
  under its per-job cap with the cut named;
- a job printing 8 MB (32 times the stored cap) keeps the database under its
  cap while it runs, is
  cancelled mid-flood, and the marker's byte count is exact: the full log
  is the stored head and tail plus exactly the bytes the marker says were cut;
- a job printing three times the agent's per-run disk cap leaves its run's
  directory on the node's disk under that cap plus a small step (the raw
  files the job writes to are freed as their lines reach the spool), and the
  stored log counts exactly the lines the node did not keep.

The floods are sized to the caps, and the caps are lowered for these tests
(`log_stored_max_bytes`, a setting; the same code path as the default 8 MiB):
every line a job prints costs the agent and the server CPU, and at the
default cap these tests printed half a million lines and 30 MB, 97 s and
44 s of a 2-core machine on PostgreSQL, the suite's longest tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from agent_support import ADMIN_TOKEN, AdminApi, ServerProc, StartAgent
from sqlalchemy import text

from schedulearn.server.db import make_engine
from waiting import wait_until

PRINTER = textwrap.dedent(
    """
    import hashlib, os, sys, time
    count, width = int(sys.argv[1]), int(sys.argv[2])
    digest_path, then_sleep = sys.argv[3], sys.argv[4]
    pad = "x" * width
    digest = hashlib.sha256()
    out = sys.stdout.buffer
    for i in range(count):
        line = f"{i:08d} {pad}\\n".encode()
        digest.update(line)
        out.write(line)
    out.flush()
    with open(digest_path, "w") as f:
        f.write(digest.hexdigest())
    if then_sleep == "sleep":
        time.sleep(3600)
    while then_sleep.startswith("until:") and not os.path.exists(then_sleep[6:]):
        time.sleep(0.1)
    """
)

MARKER = re.compile(r"\[schedulearn: (\d+) bytes \((\d+) lines\) of output were cut here")


def app_loaded(api: AdminApi) -> None:
    """The server answers /healthz before its app has loaded (a loaded machine
    takes many seconds to import it); wait for the API itself."""
    wait_until(
        lambda: api.http.get("/nodes", timeout=60).status_code == 200,
        120,
        "the server's API to answer",
        ignore=(httpx.HTTPError,),
    )


def line_bytes(text: str) -> int:
    return len(text.encode()) + 1


def all_lines(api: AdminApi, job_id: int) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    after = 0
    while True:
        r = api.http.get(f"/jobs/{job_id}/logs", params={"after": after, "limit": 10000})
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["lines"]:
            return lines
        lines += page["lines"]
        after = page["next_after"]


def stored(lines: list[dict[str, object]]) -> tuple[int, list[str]]:
    """(bytes of the output lines kept, marker texts)."""
    markers = [str(x["text"]) for x in lines if str(x["text"]).startswith("[schedulearn:")]
    kept = sum(line_bytes(str(x["text"])) for x in lines if not str(x["text"]).startswith("[sch"))
    return kept, markers


def runs_on(state_dir: Path) -> int:
    uri = f"file:{state_dir / 'agent.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
        return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])


def full_log(server: ServerProc, job_id: int) -> bytes:
    env = {**os.environ, "SCHEDULEARN_SERVER": server.url, "SCHEDULEARN_TOKEN": ADMIN_TOKEN}
    done = subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", "logs", "--full", str(job_id)],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout


STORED_CAP = 1024**2  # the server's per-job stored cap in the first test (default 8 MiB)


@pytest.mark.slow
@pytest.mark.parametrize(
    "server", [{"env": {"SCHEDULEARN_LOG_STORED_MAX_BYTES": str(STORED_CAP)}}], indirect=True
)
def test_a_hundred_thousand_lines_past_the_cap_are_all_kept(
    server: ServerProc, api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    digest_path = tmp_path / "digest"
    app_loaded(api)
    start_agent("n1", gpus=1)
    wait_until(lambda: api.node("n1"), 60, "node n1 to register")
    job_id = api.submit(
        command=[sys.executable, str(script), "100000", "20", str(digest_path), "exit"], gpus=0
    )
    job = api.wait_state(job_id, ["succeeded", "failed", "cancelled"], timeout=280)
    assert job["state"] == "succeeded", job

    got = full_log(server, job_id)
    assert got.count(b"\n") == 100_000
    assert len(got) == 3_000_000  # 30 bytes a line: three times the cap
    assert hashlib.sha256(got).hexdigest() == digest_path.read_text()

    # The database kept a head and a tail under its cap, and the marker
    # names the cut exactly: kept + cut = everything printed.
    kept, markers = stored(all_lines(api, job_id))
    assert kept <= STORED_CAP
    assert len(markers) == 1
    cut = MARKER.search(markers[0])
    assert cut is not None, markers[0]
    assert kept + int(cut.group(1)) == len(got)
    assert "logs --full" in markers[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "server", [{"env": {"SCHEDULEARN_LOG_STORED_MAX_BYTES": str(256 * 1024)}}], indirect=True
)
def test_eight_megabytes_stay_under_the_cap_and_cancel_works(
    server: ServerProc,
    api: AdminApi,
    start_agent: StartAgent,
    tmp_path: Path,
    agent_database_url: str,
) -> None:
    cap = 256 * 1024  # this server's stored cap (parametrized above; read at start)
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    app_loaded(api)
    agent = start_agent("n1", gpus=1)
    wait_until(lambda: api.node("n1"), 60, "node n1 to register")
    # 80,000 lines of 100 bytes: 8 MB, then it would sleep for an hour.
    job_id = api.submit(
        command=[sys.executable, str(script), "80000", "90", str(tmp_path / "d"), "sleep"],
        gpus=0,
    )

    engine = make_engine(agent_database_url)

    def cut_so_far() -> int:
        # One statement: a consistent look at what the database holds now.
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT text FROM log_record WHERE job_id = :j"), {"j": job_id}
            ).all()
        kept = sum(line_bytes(r[0]) for r in rows if not r[0].startswith("[schedulearn:"))
        assert kept <= cap, f"{kept} bytes stored, over the cap of {cap}"
        markers = [r[0] for r in rows if r[0].startswith("[schedulearn:")]
        found = MARKER.search(markers[0]) if markers else None
        return int(found.group(1)) if found else 0

    # The job has printed it all (it sleeps now) while the agent is still shipping
    # it: the server has cut the stored log, and stays under its cap all along.
    wait_until(lambda: (tmp_path / "d").exists(), 120, "the job to print 8 MB")
    wait_until(cut_so_far, 120, "the server to cut the job's stored log", until=lambda n: n > 0)
    api.cancel(job_id)
    job = api.wait_state(job_id, ["cancelled"], timeout=120)
    assert job["state"] == "cancelled"

    # The agent forgets a run once the server has its exit, which it reports
    # only after the rest of the output and the full log are in.
    wait_until(lambda: not runs_on(agent.state_dir), 180, "the agent to finish the run")
    kept, markers = stored(all_lines(api, job_id))
    assert kept <= cap
    assert len(markers) == 1
    cut = MARKER.search(markers[0])
    assert cut is not None, markers[0]
    got = full_log(server, job_id)
    # Every line the job printed, in order, none twice.
    lines = got.split(b"\n")[:-1]
    printed = [line for line in lines if re.match(rb"\d{8} ", line)]
    assert len(printed) == 80_000
    assert all(line.startswith(b"%08d " % i) for i, line in enumerate(printed))
    # Besides, at most the shell's word on the signal ("Terminated", on stderr).
    assert len(lines) - len(printed) <= 1, lines[-3:]
    assert kept + int(cut.group(1)) == len(got)


AGENT_CUT_START = "passed the per-job disk cap of"
AGENT_CUT_END = re.compile(
    r"\[schedulearn: (\d+) bytes \((\d+) lines\) of output past the per-job disk cap of "
    r"(\d+) bytes on node 'n1' were not kept\]"
)


def disk_used(folder: Path) -> int:
    """Bytes of disk the files under `folder` take (allocated blocks, not sizes)."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_job_printing_past_the_node_cap_costs_the_node_the_cap_only(
    server: ServerProc, api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    cap = 4 * 1024**2
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    app_loaded(api)
    agent = start_agent("n1", gpus=1, extra=("--log-disk-max-bytes", str(cap)))
    wait_until(lambda: api.node("n1"), 60, "node n1 to register")
    # 120,000 lines of 100 bytes: 12 MB, three times the cap; then it waits for `go`.
    count = 120_000
    go = tmp_path / "go"
    job_id = api.submit(
        command=[sys.executable, str(script), str(count), "90", str(tmp_path / "d"), f"until:{go}"],
        gpus=0,
    )
    wait_until(lambda: (tmp_path / "d").exists(), 120, "the job to print 12 MB")
    (run_dir,) = (agent.state_dir / "jobs").glob(f"{job_id}.*")
    stdout_log = run_dir / "stdout.log"
    assert stdout_log.stat().st_size == count * 100  # the job's raw output, all written
    # The run's spool holds up to the cap; of the raw files only what the
    # record has not yet stored (at most an eighth of the cap, by steps).
    bound = cap + cap // 8 + 512 * 1024
    wait_until(
        lambda: disk_used(run_dir),
        120,
        f"the run's directory to take at most {bound} bytes of disk",
        until=lambda used: used <= bound,
    )
    # The node's own cut is in the stored log already (the job still runs).
    wait_until(
        lambda: [x for x in all_lines(api, job_id) if AGENT_CUT_START in str(x["text"])],
        60,
        "the stored log to say where the node's cut starts",
    )
    assert disk_used(run_dir) <= bound

    go.touch()
    api.wait_state(job_id, ["succeeded"], timeout=120)
    wait_until(lambda: not runs_on(agent.state_dir), 180, "the agent to finish the run")
    texts = [str(x["text"]) for x in all_lines(api, job_id)]
    printed = [t for t in texts if re.match(r"\d{8} ", t)]
    # A head of the output, whole and in order, under the cap ...
    assert all(t.startswith(f"{i:08d} ") for i, t in enumerate(printed))
    assert sum(line_bytes(t) for t in printed) <= cap
    # ... and the end marker counts every line not kept, exactly.
    ends = [m for t in texts if (m := AGENT_CUT_END.search(t))]
    assert len(ends) == 1, texts[-3:]
    assert int(ends[0].group(3)) == cap
    assert len(printed) + int(ends[0].group(2)) == count
