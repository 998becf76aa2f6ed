"""Tenant queues over HTTP: the admin's add/set/list/rm with errors that say what to
change, who may submit where (`--queue`, a user's default, members), the live
fair-share layer (a queue below its guarantee takes GPUs back by preemption),
the reason `show` gives, the share history and `usage`. The agent's part is
played by `WireAgent`; the app runs in-process on SQLite (or PostgreSQL with
SCHEDULEARN_TEST_POSTGRES=1)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pytest
from fastapi.testclient import TestClient
from server_api import Api
from sqlmodel import Session, select
from wire_agent import WireAgent

from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    AcctReport,
    JobPublic,
    QueueList,
    QueuePublic,
    UsageReport,
)
from schedulearn.server import create_app
from schedulearn.server.models import QueueUsage
from schedulearn.server.services.queues import tenancy
from schedulearn.settings import ServerSettings
from waiting import wait_until


@pytest.fixture
def qapi(settings: ServerSettings) -> Iterator[Api]:
    # No minimum run time: a reclaim need not wait (the live e2e test keeps one).
    changes = {"queue_min_run_seconds": 0}
    with TestClient(create_app(settings.model_copy(update=changes))) as c:
        # Spoken to as this release's CLI (an unversioned client gets no `queue` field).
        c.headers[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        yield Api(c)


def job(api: Api, job_id: int, headers: dict[str, str] | None = None) -> JobPublic:
    return JobPublic.model_validate(api.get(f"/api/v1/jobs/{job_id}", headers=headers).json())


def submit(api: Api, headers: dict[str, str] | None = None, **body: object) -> int:
    r = api.post("/api/v1/jobs", headers=headers, json={"command": "x", **body})
    assert r.status_code == 201, r.text
    return int(r.json()["ids"][0])


def add_queue(api: Api, **body: object) -> QueuePublic:
    r = api.post("/api/v1/queues", json=body)
    assert r.status_code == 201, r.text
    return QueuePublic.model_validate(r.json())


def queues(api: Api) -> dict[str, QueuePublic]:
    r = api.get("/api/v1/queues")
    assert r.status_code == 200, r.text
    return {q.name: q for q in QueueList.model_validate(r.json()).items}


def test_admin_adds_changes_lists_and_removes_queues(qapi: Api) -> None:
    a = add_queue(qapi, name="team-a", guaranteed={"": 2}, limit=3, weight=2, users=["alice"])
    assert (a.guaranteed_gpus, a.limit, a.weight, a.users) == (2, 3, 2.0, ["alice"])
    again = qapi.post("/api/v1/queues", json={"name": "team-a"})
    assert again.status_code == 409 and "queue set" in again.json()["error"]
    bad = qapi.post("/api/v1/queues", json={"name": "b", "guaranteed": {"": 4}, "limit": 2})
    assert bad.status_code == 400, bad.text
    assert "limit 2 is below its 4 guaranteed GPUs" in bad.json()["error"]
    r = qapi.client.patch(
        "/api/v1/queues/team-a",
        headers=qapi.admin,
        json={"guaranteed": {"v100": 1}, "clear_limit": True, "default_for": ["bob"]},
    )
    assert r.status_code == 200, r.text
    changed = QueuePublic.model_validate(r.json())
    assert changed.guaranteed == {"v100": 1} and changed.limit is None
    assert changed.users == ["alice", "bob"] and changed.default_for == ["bob"]
    assert set(queues(qapi)) == {"team-a"}
    # Users may look but not change.
    bob = qapi.user_token("bob")
    assert qapi.get("/api/v1/queues", headers=bob).status_code == 200
    assert qapi.post("/api/v1/queues", headers=bob, json={"name": "x"}).status_code == 403
    assert qapi.client.delete("/api/v1/queues/team-a", headers=bob).status_code == 403
    gone = qapi.client.delete("/api/v1/queues/team-a", headers=qapi.admin)
    assert gone.status_code == 200 and queues(qapi) == {}
    missing = qapi.client.delete("/api/v1/queues/team-a", headers=qapi.admin)
    assert missing.status_code == 404 and "queue list" in missing.json()["error"]


def test_submissions_go_to_the_named_or_default_queue_of_members_only(qapi: Api) -> None:
    add_queue(qapi, name="team-a", guaranteed={"": 1}, users=["alice"], default_for=["alice"])
    add_queue(qapi, name="open", guaranteed={"": 1})
    alice, bob = qapi.user_token("alice"), qapi.user_token("bob")
    assert job(qapi, submit(qapi, alice)).model_dump()["queue"] == "team-a"  # her default
    assert job(qapi, submit(qapi, alice, queue="open")).model_dump()["queue"] == "open"
    # Bob has no default queue: best-effort; "open" has no members: open to all.
    assert job(qapi, submit(qapi, bob)).model_dump()["queue"] == "default"
    assert job(qapi, submit(qapi, bob, queue="open")).model_dump()["queue"] == "open"
    refused = qapi.post("/api/v1/jobs", headers=bob, json={"command": "x", "queue": "team-a"})
    assert refused.status_code == 403
    assert "queue set team-a --add-user bob" in refused.json()["error"]
    unknown = qapi.post("/api/v1/jobs", headers=bob, json={"command": "x", "queue": "nope"})
    assert unknown.status_code == 400
    assert "no queue 'nope'; the queues are: open, team-a" in unknown.json()["error"]
    # The open queue's use shows up in the list: pending jobs per queue.
    listed = queues(qapi)
    assert listed["team-a"].pending_jobs == 1 and listed["open"].pending_jobs == 2
    assert not listed["default"].declared and listed["default"].pending_jobs == 1


def a_holds_every_gpu(api: Api, gpus: int) -> tuple[WireAgent, list[int], dict[int, int]]:
    """One node of `gpus` GPUs, queues A and B guaranteed half each, and A's
    preemptible 1-GPU jobs running on all of them: the node, A's jobs, and
    each one's attempt."""
    node = WireAgent(api, "n1", gpus=gpus)
    node.register()
    add_queue(api, name="A", guaranteed={"": gpus // 2})
    add_queue(api, name="B", guaranteed={"": gpus // 2})
    a_jobs = [submit(api, queue="A", gpus=1, preemptible=True) for _ in range(gpus)]
    starts = node.work_until(lambda b: len(b.starts) == gpus).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    api.settle()
    assert queues(api)["A"].used == gpus
    return node, a_jobs, {s.job_id: s.attempt for s in starts}


def test_a_queue_below_its_guarantee_preempts_the_queue_over_it(qapi: Api) -> None:
    node, a_jobs, attempts = a_holds_every_gpu(qapi, 4)
    extra = submit(qapi, queue="A", gpus=1, preemptible=True)
    b_job = submit(qapi, queue="B", gpus=2, preemptible=True)
    stops = node.work_until(lambda b: len(b.stops) >= 2).stops
    assert {s.reason for s in stops} == {"preempt"} and len(stops) == 2
    assert {s.job_id for s in stops} <= set(a_jobs)
    # While A's victims drain, A's waiting job is told why it waits.
    why = job(qapi, extra).waiting_reason or ""
    assert "A uses 2 of its 2 guaranteed GPUs" in why and "other queues are waiting" in why, why
    for stop in stops:
        node.exit(stop.job_id, attempts[stop.job_id], -15)
    b_start = node.work_until(lambda b: any(s.job_id == b_job for s in b.starts)).starts
    (mine,) = [s for s in b_start if s.job_id == b_job]
    node.start(b_job, mine.attempt)
    listed = wait_until(
        lambda: queues(qapi),
        10,
        "B to hold its 2 guaranteed GPUs",
        until=lambda q: q["B"].used == 2 and q["A"].used == 2,
    )
    assert listed["A"].pending_jobs == 3  # two victims back in the queue, and the extra
    history = qapi.get("/api/v1/queues/history").json()["samples"]
    assert {s["queue"] for s in history} >= {"A", "B"}
    assert any(s["queue"] == "A" and s["used"] == 4 for s in history)
    usage = UsageReport.model_validate(qapi.get("/api/v1/usage?by=queue&since=1h").json())
    rows = {r.key: r for r in usage.rows}
    assert rows["A"].jobs == 5 and rows["A"].started == 4
    assert rows["B"].jobs == 1 and rows["B"].started == 1
    assert rows["A"].gpu_hours > 0 and rows["B"].mean_wait_seconds is not None


def test_usage_refuses_a_since_it_cannot_read(qapi: Api) -> None:
    r = qapi.get("/api/v1/usage?since=yesterday")
    assert r.status_code == 400 and "90m, 12h, 7d, 2w" in r.json()["error"]
    r = qapi.get("/api/v1/usage?by=team")
    assert r.status_code == 422


def test_guarantees_beyond_the_cluster_are_refused_unless_overcommitted(qapi: Api) -> None:
    # No node yet: nothing to judge against, so nothing is refused (queues first, agents later).
    add_queue(qapi, name="early", guaranteed={"": 6})
    WireAgent(qapi, "n1", gpus=4).register()
    WireAgent(qapi, "n2", gpus=4).register()
    listed = QueueList.model_validate(qapi.get("/api/v1/queues").json())
    assert (listed.promised, listed.cluster_gpus) == (6, 8)
    assert listed.promised_text == "queues promise 6 of the cluster's 8 GPUs"
    typed = qapi.post("/api/v1/queues", json={"name": "v", "guaranteed": {"v100": 1}})
    assert typed.status_code == 400, typed.text
    assert (
        "v100 guarantees would total 1 GPUs, more than the cluster's 0 v100"
        in (typed.json()["error"])
    )
    add_queue(qapi, name="fits", guaranteed={"": 2})
    over = qapi.post("/api/v1/queues", json={"name": "team-a", "guaranteed": {"": 2}})
    assert over.status_code == 400, over.text
    msg = over.json()["error"]
    assert "would add up to 10 GPUs and the cluster has 8 (early 6, fits 2, team-a 2)" in msg
    assert "--overcommit" in msg and "queue set team-a --guaranteed N" in msg
    assert "team-a" not in queues(qapi)  # nothing stored
    # Raising a guarantee is checked too; lowering one never is.
    raise_it = qapi.client.patch(
        "/api/v1/queues/fits", headers=qapi.admin, json={"guaranteed": {"": 3}}
    )
    assert raise_it.status_code == 400 and "would add up to 9 GPUs" in raise_it.json()["error"]
    assert queues(qapi)["fits"].guaranteed_gpus == 2
    # Said on purpose: accepted, and the list shows the total beyond the cluster.
    made = qapi.post(
        "/api/v1/queues", json={"name": "team-a", "guaranteed": {"": 2}, "overcommit": True}
    )
    assert made.status_code == 201, made.text
    listed = QueueList.model_validate(qapi.get("/api/v1/queues").json())
    assert listed.promised_text == "queues promise 10 of the cluster's 8 GPUs (overcommitted by 2)"
    lower = qapi.client.patch(
        "/api/v1/queues/early", headers=qapi.admin, json={"guaranteed": {"": 5}}
    )
    assert lower.status_code == 200, lower.text
    weight = qapi.client.patch("/api/v1/queues/early", headers=qapi.admin, json={"weight": 2})
    assert weight.status_code == 200, weight.text


def test_a_non_preemptible_borrower_is_requeued_and_says_who_took_its_gpus(qapi: Api) -> None:
    """Issue 32: jobs that name no queue borrow team-a's idle GPUs; when team-a
    wants them, two are requeued, and the API, `show`'s message and the web job
    page say who took the GPUs back; the requeued job then says why it waits."""
    import re

    from server_api import ADMIN

    node = WireAgent(qapi, "n1", gpus=4)
    node.register()
    add_queue(qapi, name="team-a", guaranteed={"": 2})
    plain = [submit(qapi, gpus=1) for _ in range(4)]  # no queue, not preemptible
    starts = node.work_until(lambda b: len(b.starts) == 4).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    qapi.settle()
    assert queues(qapi)["default"].used == 4
    mine = submit(qapi, queue="team-a", gpus=2)
    stops = node.work_until(lambda b: len(b.stops) >= 2).stops
    assert {s.reason for s in stops} == {"preempt"} and len(stops) == 2
    victims = {s.job_id for s in stops}
    assert victims <= set(plain)
    attempts = {s.job_id: s.attempt for s in starts}
    for stop in stops:
        node.exit(stop.job_id, attempts[stop.job_id], -15)
    node.work_until(lambda b: any(s.job_id == mine for s in b.starts))
    line = (
        f"requeued: team-a took back 1 GPU default had borrowed, for job {mine}; "
        "not preemptible, so it starts again from the beginning"
    )
    victim = min(victims)
    steps = qapi.get(f"/api/v1/jobs/{victim}/history").json()["transitions"]
    assert [t["message"] for t in steps if t["to_state"] == "preempting"] == [line]
    waiting = wait_until(
        lambda: job(qapi, victim),
        10,
        "the victim back in line",
        until=lambda j: j.state == "pending",
    )
    assert waiting.message == line and waiting.preemptions == 1
    assert waiting.predicted_start_at is None
    # The web job page shows the line in its history.
    form = qapi.client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce, form.text
    signed = qapi.client.post(
        "/ui/login", data={"token": ADMIN, "nonce": nonce.group(1), "next": "/ui/jobs"}
    )
    assert signed.status_code in (200, 303), signed.text
    page = qapi.client.get(f"/ui/jobs/{victim}").text
    assert line in page.replace("&#39;", "'"), page


def test_a_job_its_queue_could_never_start_is_refused_at_submit(qapi: Api) -> None:
    add_queue(qapi, name="capped", limit=1)
    # No node yet: nothing can be judged, so nothing is refused.
    submit(qapi, queue="capped", gpus=2)
    WireAgent(qapi, "n1", gpus=4).register()
    refused = qapi.post("/api/v1/jobs", json={"command": "x", "queue": "capped", "gpus": 2})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == (
        "this job can never start under the current queues: queue capped may hold at most "
        "1 GPUs (its limit) and this job asks for 2; ask for 1 or fewer, or raise the limit "
        "(schedulearn queue set capped --limit 2)"
    )
    submit(qapi, queue="capped", gpus=1)  # within the limit
    submit(qapi, gpus=2)  # the default queue has no limit


def test_acct_counts_a_preemption_and_sums_to_usage(qapi: Api) -> None:
    node, a_jobs, attempts = a_holds_every_gpu(qapi, 2)
    b_job = submit(qapi, queue="B", gpus=1, preemptible=True)
    (stop,) = node.work_until(lambda b: len(b.stops) >= 1).stops
    node.exit(stop.job_id, attempts[stop.job_id], -15)
    (b_start,) = node.work_until(lambda b: any(s.job_id == b_job for s in b.starts)).starts
    node.start(b_job, b_start.attempt)
    qapi.settle()

    report = AcctReport.model_validate(qapi.get("/api/v1/acct?since=1h").json())
    rows = {r.id: r for r in report.rows}
    assert sorted(rows) == sorted([*a_jobs, b_job]) and report.total == 3
    victim = rows[stop.job_id]
    assert (victim.queue, victim.state, victim.preemptions) == ("A", "pending", 1)
    assert victim.ran_seconds > 0 and victim.gpu_hours > 0 and victim.started_at is not None
    assert rows[b_job].queue == "B" and rows[b_job].started_at is not None
    only_b = qapi.get("/api/v1/acct", params={"queue": "B", "state": "running"}).json()
    assert [r["id"] for r in only_b["rows"]] == [b_job]
    # Per job and per queue, GPU-hours are the one rule (`services.holds`).
    usage = UsageReport.model_validate(qapi.get("/api/v1/usage?by=queue&since=1h").json())
    per_queue = {r.key: r.gpu_hours for r in usage.rows}
    for queue in ("A", "B"):
        mine = sum(r.gpu_hours for r in rows.values() if r.queue == queue)
        assert mine == pytest.approx(per_queue[queue], abs=1e-4)
    refused = qapi.get("/api/v1/acct?since=yesterday")
    assert refused.status_code == 400 and "90m, 12h, 7d, 2w" in refused.json()["error"]


def test_a_large_job_on_borrowed_gpus_does_not_make_its_queue_ahead(qapi: Api) -> None:
    # A (guaranteed 1 of 4) runs a 4-GPU job on GPUs borrowed from B: its team
    # alone could not have run it, so that GPU-time does not count towards A's
    # share (`Tenancy.served`). Then B's borrowers fill the node, and A's
    # 1-GPU job takes its guarantee back at once, as if A had used nothing.
    node = WireAgent(qapi, "n1", gpus=4)
    node.register()
    add_queue(qapi, name="A", guaranteed={"": 1})
    add_queue(qapi, name="B", guaranteed={"": 3})
    big = submit(qapi, queue="A", gpus=4, preemptible=True)
    (start,) = node.work_until(lambda b: len(b.starts) == 1).starts
    node.start(big, start.attempt)
    wait_until(lambda: queues(qapi), 10, "A to hold 4 GPUs", until=lambda q: q["A"].used == 4)
    time.sleep(3.0)  # A's usage grows over a few scheduler rounds (1 s ticks)
    node.exit(big, start.attempt, 0)
    b_jobs = [submit(qapi, queue="B", gpus=1, preemptible=True) for _ in range(4)]
    starts = node.work_until(lambda b: len(b.starts) >= 4).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    wait_until(lambda: queues(qapi), 10, "B to hold 4 GPUs", until=lambda q: q["B"].used == 4)
    small = submit(qapi, queue="A", gpus=1, preemptible=True)
    # Had the large job's GPU-time counted, A would be "ahead" (99% of the use
    # lately against its 25%) and take nothing back until B caught up.
    why = job(qapi, small).waiting_reason or ""
    assert "takes nothing back" not in why, why
    stops = node.work_until(lambda b: len(b.stops) >= 1).stops
    assert [s.reason for s in stops] == ["preempt"] and stops[0].job_id in b_jobs, stops


def usage_rows(api: Api) -> dict[str, QueueUsage]:
    with Session(api.state.db.engine) as s:
        return {r.queue: r for r in s.exec(select(QueueUsage)).all()}


def test_the_server_keeps_what_each_queue_was_owed(qapi: Api) -> None:
    # A (guaranteed 1 of 2) runs two 1-GPU jobs (one on B's idle GPU) while a
    # third and a 2-GPU job wait. It is owed its 1 GPU: what its jobs that fit
    # the guarantee ask for (3), at most the guarantee; the 2-GPU job, larger
    # than the guarantee, is owed nothing. B wants nothing and is owed nothing.
    # The scheduler's snapshot then carries the decayed figure (`Tenancy.owed`),
    # which A is judged ahead or behind on.
    node = WireAgent(qapi, "n1", gpus=2)
    node.register()
    add_queue(qapi, name="A", guaranteed={"": 1})
    add_queue(qapi, name="B", guaranteed={"": 1})
    small = [submit(qapi, queue="A", gpus=1, preemptible=True) for _ in range(3)]
    submit(qapi, queue="A", gpus=2, preemptible=True)
    starts = node.work_until(lambda b: len(b.starts) == 2).starts
    assert {s.job_id for s in starts} <= set(small)
    for s in starts:
        node.start(s.job_id, s.attempt)
    qapi.settle()
    rows = wait_until(
        lambda: usage_rows(qapi), 10, "A to hold 2 GPUs", until=lambda r: r["A"].busy == 2
    )
    a = rows["A"]
    assert (a.busy, a.serving, a.owing) == (2, 2, 1)
    assert "B" not in rows or rows["B"].owing == 0

    def owed() -> Mapping[str, float]:
        with Session(qapi.state.db.engine) as s:
            t = tenancy(s, time.time())
        assert t is not None and t.owed is not None
        return t.owed

    now = wait_until(owed, 10, "A owed some GPU-time", until=lambda o: o["A"] > 0)
    assert now.get("B", 0.0) == 0.0
