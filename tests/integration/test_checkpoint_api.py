"""Checkpoints carried by the server: upload limits and integrity, download,
the next attempt's assignment naming the checkpoint, and the agent's
refusal to unpack anything outside the checkpoint directory."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from httpx import Response
from server_api import Api
from wire_agent import WireAgent

from schedulearn.agent.checkpoints import CheckpointError, pack, safe_extract
from schedulearn.server import db
from schedulearn.server.services import checkpoints
from schedulearn.settings import ServerSettings

LIMIT = 64 * 1024


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
        checkpoint_store_dir=str(tmp_path / "store"),
        checkpoint_max_bytes=LIMIT,
    )


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _put(api: Api, job_id: int, attempt: int, body: bytes, sha: str | None = None) -> Response:
    response: Response = api.client.put(
        f"/api/v1/agent/jobs/{job_id}/checkpoint",
        params={"attempt": attempt, "node": "n1"},
        headers={**api.node("n1"), "X-Checkpoint-Sha256": sha or hashlib.sha256(body).hexdigest()},
        content=body,
    )
    return response


def _running_job(api: Api) -> tuple[WireAgent, int, int]:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    r = api.post("/api/v1/jobs", json={"command": "train", "gpus": 1, "preemptible": True})
    job_id = r.json()["ids"][0]
    start = node.work_until(lambda b: b.starts).starts[0]
    node.start(job_id, start.attempt)
    return node, job_id, start.attempt


def test_upload_download_and_the_next_attempt_names_it(api: Api, tmp_path: Path) -> None:
    node, job_id, attempt = _running_job(api)
    body = _tar({"checkpoint.pkl": b"weights" * 100})
    r = _put(api, job_id, attempt, body)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "attempt": attempt,
        "sha256": hashlib.sha256(body).hexdigest(),
        "size_bytes": len(body),
    }
    assert api.get(f"/api/v1/jobs/{job_id}").json()["checkpoint"]["attempt"] == attempt
    got = api.client.get(f"/api/v1/agent/jobs/{job_id}/checkpoint", headers=api.node("n1"))
    assert got.status_code == 200 and got.content == body
    assert got.headers["X-Checkpoint-Sha256"] == hashlib.sha256(body).hexdigest()
    # Moved to the other GPU: the next attempt's assignment carries the checkpoint.
    moved = api.post(f"/api/v1/jobs/{job_id}/move", json={"placement": {"n1": [1]}})
    assert moved.status_code == 200, moved.text
    stop = node.work_until(lambda b: b.stops).stops[0]
    assert stop.reason == "preempt"
    node.exit(job_id, attempt, 0)
    nxt = node.work_until(lambda b: b.starts).starts[0]
    assert nxt.attempt == attempt + 1 and nxt.gpus == [1]
    assert nxt.checkpoint is not None and nxt.checkpoint.sha256 == hashlib.sha256(body).hexdigest()
    assert nxt.upload_checkpoint is True
    # A late upload from the older attempt never replaces a newer checkpoint.
    newer = _tar({"checkpoint.pkl": b"newer"})
    assert _put(api, job_id, nxt.attempt, newer).status_code == 200
    stale = _put(api, job_id, attempt, _tar({"checkpoint.pkl": b"old"}))
    assert stale.status_code == 200 and stale.json()["attempt"] == nxt.attempt
    again = api.client.get(f"/api/v1/agent/jobs/{job_id}/checkpoint", headers=api.node("n1"))
    assert again.content == newer


def test_oversized_and_damaged_uploads_are_refused(api: Api, tmp_path: Path) -> None:
    _, job_id, attempt = _running_job(api)
    big = _tar({"big.bin": b"x" * (LIMIT + 1)})
    r = _put(api, job_id, attempt, big)
    assert r.status_code == 413
    assert "SCHEDULEARN_CHECKPOINT_MAX_BYTES" in r.json()["error"]
    body = _tar({"ok": b"1"})
    r = _put(api, job_id, attempt, body, sha="0" * 64)
    assert r.status_code == 400 and "damaged" in r.json()["error"]
    assert api.get(f"/api/v1/jobs/{job_id}").json()["checkpoint"] is None
    missing = api.client.get(f"/api/v1/agent/jobs/{job_id}/checkpoint", headers=api.node("n1"))
    assert missing.status_code == 404
    assert list((tmp_path / "store").iterdir()) == []  # nothing half-written is kept
    user = api.user_token("alice")
    assert _put(api, job_id, attempt, body).status_code == 200
    assert (
        api.client.get(f"/api/v1/agent/jobs/{job_id}/checkpoint", headers=user).status_code == 403
    )


def test_checkpoints_of_finished_jobs_are_pruned(
    api: Api, database_url: str, tmp_path: Path
) -> None:
    _, job_id, attempt = _running_job(api)
    assert _put(api, job_id, attempt, _tar({"w": b"1"})).status_code == 200
    store = tmp_path / "store"
    database = db.Database(database_url)
    try:
        with database.session() as session:
            assert checkpoints.prune(session, store) == 0  # still running: kept
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
        with database.session() as session:
            assert checkpoints.prune(session, store) == 1
    finally:
        database.close()
    assert not checkpoints.file_of(store, job_id).exists()
    assert api.get(f"/api/v1/jobs/{job_id}").json()["checkpoint"] is None


@pytest.mark.parametrize(
    "name",
    ["../escape.txt", "/etc/evil", "a/../../escape"],
)
def test_the_agent_refuses_to_unpack_outside_the_directory(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "bad.tar"
    archive.write_bytes(_tar({"fine.txt": b"ok", name: b"evil"}))
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(CheckpointError, match="refusing"):
        safe_extract(archive, target)
    assert list(target.iterdir()) == []  # checked before anything is written


def test_the_agent_refuses_links_and_packs_only_plain_files(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    archive = tmp_path / "link.tar"
    archive.write_bytes(out.getvalue())
    (tmp_path / "t").mkdir()
    with pytest.raises(CheckpointError):
        safe_extract(archive, tmp_path / "t")
    source = tmp_path / "ckpt"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "w.pkl").write_bytes(b"w")
    (source / ".checkpoint.pkl.123.tmp").write_bytes(b"half")
    (source / "outside").symlink_to("/etc/passwd")
    packed = pack(source, tmp_path / "p.tar")
    assert packed is not None and packed.files == 1
    restored = tmp_path / "restored"
    restored.mkdir()
    assert safe_extract(packed.path, restored) == 1
    assert (restored / "sub" / "w.pkl").read_bytes() == b"w"
    assert pack(tmp_path / "empty-or-missing", tmp_path / "none.tar") is None
