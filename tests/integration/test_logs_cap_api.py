"""The server's side of job output: a per-job stored cap with head, tail and
an exact cut marker, the agent asked for the full log, the full log served
as plain text, and retention deleting old logs."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from server_api import Api
from wire_agent import WireAgent

from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from schedulearn.server import db
from schedulearn.server.services import full_logs, logs
from schedulearn.server.services.uploads import Upload
from schedulearn.settings import ServerSettings

CAP = 64 * 1024


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> ServerSettings:
    from server_api import ADMIN, AGENT

    return ServerSettings(
        database_url=database_url,
        admin_token=ADMIN,
        agent_token=AGENT,
        heartbeat_seconds=0.5,
        node_timeout_seconds=5.0,
        tick_seconds=0.2,
        stop_grace_seconds=1.0,
        log_stored_max_bytes=CAP,
        log_store_dir=str(tmp_path / "logs"),
        log_retention_days=1.0,
    )


def running_job(api: Api) -> tuple[WireAgent, int, int]:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    r = api.post("/api/v1/jobs", json={"command": "train", "gpus": 1})
    job_id = r.json()["ids"][0]
    start = node.work_until(lambda b: b.starts).starts[0]
    node.start(job_id, start.attempt)
    return node, job_id, start.attempt


def send(
    api: Api, node: WireAgent, job_id: int, attempt: int, texts: list[str], first: int
) -> dict[str, Any]:
    body = {
        "attempt": attempt,
        "node": node.name,
        "lines": [{"seq": first + i, "text": t, "at": 1.0} for i, t in enumerate(texts)],
    }
    # This release's protocol: replies to protocol 1 leave out fields it lacked.
    headers = {**node.headers, PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    r = api.post(f"/api/v1/agent/jobs/{job_id}/logs", headers=headers, json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def upload_full_log(
    api: Api, node: WireAgent, job_id: int, attempt: int, texts: list[str]
) -> bytes:
    """Upload `texts` as the attempt's whole spool, as its agent does; the spool."""
    spool = b"".join(f"o1.000000 {t}\n".encode() for t in texts)
    r = api.client.put(
        f"/api/v1/agent/jobs/{job_id}/full-log",
        params={"attempt": attempt, "node": node.name},
        headers={**node.headers, "X-Log-Sha256": hashlib.sha256(spool).hexdigest()},
        content=spool,
    )
    assert r.status_code == 200, r.text
    return spool


def stored_lines(api: Api, job_id: int) -> list[str]:
    r = api.get(f"/api/v1/jobs/{job_id}/logs", params={"limit": 10000})
    assert r.status_code == 200, r.text
    return [line["text"] for line in r.json()["lines"]]


def test_a_job_over_the_cap_keeps_head_and_tail_and_names_the_cut_exactly(api: Api) -> None:
    node, job_id, attempt = running_job(api)
    printed = [f"{i:06d} " + "y" * 92 for i in range(3000)]  # 100 bytes a line with its newline
    acks = [send(api, node, job_id, attempt, printed[i : i + 200], i) for i in range(0, 3000, 200)]
    assert not acks[0].get("full_log_wanted")  # 20,000 bytes: the head holds it all
    assert acks[-1].get("full_log_wanted") is True

    lines = stored_lines(api, job_id)
    markers = [t for t in lines if t.startswith("[schedulearn:")]
    kept = [t for t in lines if not t.startswith("[schedulearn:")]
    assert len(markers) == 1
    assert sum(len(t) + 1 for t in kept) <= CAP
    # The head is the first lines, the tail the latest, in order, none repeated.
    head = lines[: lines.index(markers[0])]
    tail = lines[lines.index(markers[0]) + 1 :]
    assert head == printed[: len(head)] and tail == printed[-len(tail) :]
    cut_lines = 3000 - len(head) - len(tail)
    assert f"{cut_lines * 100} bytes ({cut_lines} lines) of output were cut here" in markers[0]
    assert f"logs --full {job_id}" in markers[0]

    # The agent uploads the run's whole spool; `logs --full` gives every line.
    upload_full_log(api, node, job_id, attempt, printed)
    full = api.get(f"/api/v1/jobs/{job_id}/logs/full")
    assert full.status_code == 200
    assert full.content == "".join(t + "\n" for t in printed).encode()
    # Someone else's job: hidden.
    other = api.user_token("mallory")
    assert api.get(f"/api/v1/jobs/{job_id}/logs/full", headers=other).status_code == 403


def test_a_full_log_written_over_by_another_server_is_not_printed_as_this_jobs(
    api: Api, tmp_path: Path
) -> None:
    """Two servers on two databases keeping their full logs in one folder (the
    default store of servers on PostgreSQL is the user's data directory) both
    write job 1's `attempt-1.log`: the tests once printed another test's job
    as theirs. The file is not the one this attempt's agent uploaded, so the
    server prints the lines its database kept, and says why."""
    node, job_id, attempt = running_job(api)
    printed = [f"{i:06d} " + "y" * 92 for i in range(1000)]
    for i in range(0, 1000, 200):
        send(api, node, job_id, attempt, printed[i : i + 200], i)
    spool = upload_full_log(api, node, job_id, attempt, printed)
    path = full_logs.file_of(tmp_path / "logs", job_id, attempt)
    assert api.get(f"/api/v1/jobs/{job_id}/logs/full").content == spool.replace(b"o1.000000 ", b"")

    path.write_bytes(b"o1.000000 someone else's job\n" * 80_000)  # another server's upload
    full = api.get(f"/api/v1/jobs/{job_id}/logs/full")
    assert full.status_code == 200
    note, *rest = full.text.splitlines()
    assert "no longer in the log store" in note and "SCHEDULEARN_LOG_STORE_DIR" in note
    assert rest == stored_lines(api, job_id) and rest[0] == printed[0]
    assert "someone else" not in full.text

    path.unlink()  # removed by hand: the same
    assert api.get(f"/api/v1/jobs/{job_id}/logs/full").text.splitlines() == [note, *rest]


def test_a_batch_sent_again_after_a_lost_reply_is_stored_once(api: Api) -> None:
    node, job_id, attempt = running_job(api)
    send(api, node, job_id, attempt, ["up", "down"], 0)
    # The reply was lost (the server was killed after its commit): the agent sends
    # the batch again from its last acknowledged line, with the next line added.
    send(api, node, job_id, attempt, ["up", "down", "again"], 0)
    send(api, node, job_id, attempt, ["again"], 2)
    assert stored_lines(api, job_id) == ["up", "down", "again"]


def test_lines_numbered_past_32_bits_up_to_the_protocols_bound_are_stored(api: Api) -> None:
    # An agent numbers a run's lines from 0; the protocol takes up to 2**62.
    node, job_id, attempt = running_job(api)
    send(api, node, job_id, attempt, ["a", "b"], 2**31 - 1)  # across the 32-bit bound
    send(api, node, job_id, attempt, ["c", "d", "e"], 2**62 - 2)  # the last is 2**62
    send(api, node, job_id, attempt, ["d", "e"], 2**62 - 1)  # sent again: stored once
    assert stored_lines(api, job_id) == ["a", "b", "c", "d", "e"]


def test_a_damaged_full_log_is_refused(api: Api) -> None:
    node, job_id, attempt = running_job(api)
    r = api.client.put(
        f"/api/v1/agent/jobs/{job_id}/full-log",
        params={"attempt": attempt, "node": node.name},
        headers={**node.headers, "X-Log-Sha256": "0" * 64},
        content=b"o1.0 hello\n",
    )
    assert r.status_code == 400 and "damaged" in r.json()["error"]


def test_an_upload_sent_again_while_the_first_still_arrives_keeps_every_line(
    api: Api, database_url: str, tmp_path: Path
) -> None:
    """An agent whose upload timed out sends the file again while the first
    request may still be arriving. Both once wrote one temporary file: the
    second's truncation left a run of zeros in the first's, which
    `logs --full` read as lines missing (seen on a loaded machine)."""
    node, job_id, attempt = running_job(api)
    store = tmp_path / "logs"
    printed = [f"{i:06d} " + "z" * 40 for i in range(20_000)]
    spool = b"".join(f"o1.000000 {t}\n".encode() for t in printed)
    sha256 = hashlib.sha256(spool).hexdigest()

    async def both() -> list[Upload]:
        first_half_written, go_on = asyncio.Event(), asyncio.Event()

        async def slow() -> AsyncIterator[bytes]:
            yield spool[: len(spool) // 2]
            first_half_written.set()  # asked for more: the first half is on disk
            await go_on.wait()
            yield spool[len(spool) // 2 :]

        async def whole() -> AsyncIterator[bytes]:
            yield spool

        def receive(body: AsyncIterator[bytes]) -> asyncio.Task[Upload]:
            return asyncio.create_task(
                full_logs.receive(body, store, job_id, attempt, node.name, sha256, 1 << 30, None)
            )

        first = receive(slow())
        await first_half_written.wait()
        again = await receive(whole())
        go_on.set()
        return [again, await first]

    uploads = asyncio.run(both())
    database = db.Database(database_url)
    try:
        for upload in uploads:  # each is kept in turn, as its request ends
            with database.session() as session:
                full_logs.commit(session, store, upload, time.time())
            full = api.get(f"/api/v1/jobs/{job_id}/logs/full")
            assert full.status_code == 200
            assert full.content == "".join(t + "\n" for t in printed).encode()
    finally:
        database.close()
    # Nothing left behind but the attempt's log.
    assert [p.name for p in (store / f"job-{job_id}").iterdir()] == [f"attempt-{attempt}.log"]


def test_retention_deletes_the_logs_of_old_jobs_only(
    api: Api, database_url: str, tmp_path: Path
) -> None:
    node, job_id, attempt = running_job(api)
    send(api, node, job_id, attempt, ["kept while it runs"], 0)
    store = tmp_path / "logs"
    (store / f"job-{job_id}").mkdir(parents=True)
    database = db.Database(database_url)
    try:
        with database.session() as session:
            # Running: never expired, however old.
            assert logs.expire(session, store, time.time() + 10 * 86400, 1.0) == 0
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
        with database.session() as session:
            assert logs.expire(session, store, time.time(), 1.0) == 0  # ended just now
            assert logs.expire(session, store, time.time() + 2 * 86400, 0.0) == 0  # 0: forever
            assert logs.expire(session, store, time.time() + 2 * 86400, 1.0) == 1
    finally:
        database.close()
    assert stored_lines(api, job_id) == []
    assert not (store / f"job-{job_id}").exists()
