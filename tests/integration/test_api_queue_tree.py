"""A queue tree in the live scheduler (issue 32 item 6): children share their
parent's guarantee first. `research` (4 GPUs) has two children guaranteed 2 each;
`other` is guaranteed the other 4 of 8 and fills the cluster. A child whose
sibling is idle counts the sibling's part of the parent's guarantee as its own
(4, not 2) and takes 4 GPUs back; when the sibling's jobs arrive, it takes its
2 back from the child. A tree the core refuses is a 422 with its message, and
nothing is stored; a parent with children is not removed. The agent's part is
played by `WireAgent`; the app runs in-process on SQLite (or PostgreSQL with
SCHEDULEARN_TEST_POSTGRES=1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from server_api import Api
from wire_agent import WireAgent

from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, QueueList, QueuePublic
from schedulearn.server import create_app
from schedulearn.settings import ServerSettings
from waiting import wait_until


@pytest.fixture
def qapi(settings: ServerSettings) -> Iterator[Api]:
    # No minimum run time: a reclaim need not wait.
    changes = {"queue_min_run_seconds": 0}
    with TestClient(create_app(settings.model_copy(update=changes))) as c:
        c.headers[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        yield Api(c)


def submit(api: Api, **body: object) -> int:
    r = api.post("/api/v1/jobs", json={"command": "x", **body})
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


def run_starts(node: WireAgent, count: int, attempts: dict[int, int]) -> list[int]:
    """Wait for `count` starts, report each started; the jobs started."""
    starts = node.work_until(lambda b: len(b.starts) >= count).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
        attempts[s.job_id] = s.attempt
    return [s.job_id for s in starts]


def preempted(node: WireAgent, count: int, attempts: dict[int, int]) -> list[int]:
    """Wait for `count` preemption orders and let each job exit: the jobs stopped."""
    stops = node.work_until(lambda b: len(b.stops) >= count).stops
    assert {s.reason for s in stops} == {"preempt"}, stops
    for s in stops:
        node.exit(s.job_id, attempts[s.job_id], -15)
    return [s.job_id for s in stops]


def test_a_child_takes_its_idle_siblings_part_of_the_parents_guarantee(qapi: Api) -> None:
    node = WireAgent(qapi, "n1", gpus=8)
    node.register()
    add_queue(qapi, name="research", guaranteed={"": 4})
    add_queue(qapi, name="vision", parent="research", guaranteed={"": 2})
    add_queue(qapi, name="nlp", parent="research", guaranteed={"": 2})
    add_queue(qapi, name="other", guaranteed={"": 4})
    attempts: dict[int, int] = {}
    other = [submit(qapi, queue="other", gpus=1, preemptible=True) for _ in range(8)]
    assert sorted(run_starts(node, 8, attempts)) == other
    qapi.settle()

    # vision wants 4; nlp is idle: vision's guarantee is its 2 and nlp's 2.
    vision = [submit(qapi, queue="vision", gpus=1, preemptible=True) for _ in range(4)]
    shown = wait_until(
        lambda: queues(qapi), 10, "vision's share", until=lambda q: q["vision"].pending_jobs == 4
    )
    assert shown["vision"].parent == "research" and shown["vision"].guaranteed_gpus == 4
    assert shown["vision"].guaranteed == {"": 2}  # what it declares stays 2
    assert set(preempted(node, 4, attempts)) <= set(other)
    assert sorted(run_starts(node, 4, attempts)) == vision
    listed = wait_until(
        lambda: queues(qapi),
        10,
        "vision to hold 4 GPUs",
        until=lambda q: q["vision"].used == 4 and q["other"].used == 4,
    )
    assert listed["other"].pending_jobs == 4

    # nlp's jobs arrive: it is below its own 2 and takes them back from vision.
    nlp = [submit(qapi, queue="nlp", gpus=1, preemptible=True) for _ in range(2)]
    assert set(preempted(node, 2, attempts)) <= set(vision)
    assert sorted(run_starts(node, 2, attempts)) == nlp
    listed = wait_until(
        lambda: queues(qapi),
        10,
        "vision and nlp to hold 2 GPUs each",
        until=lambda q: (q["vision"].used, q["nlp"].used, q["other"].used) == (2, 2, 4),
    )
    assert listed["vision"].guaranteed_gpus == listed["nlp"].guaranteed_gpus == 2


def test_a_tree_the_core_refuses_is_a_422_and_nothing_is_stored(qapi: Api) -> None:
    add_queue(qapi, name="research", guaranteed={"": 2})
    add_queue(qapi, name="vision", parent="research", guaranteed={"": 2})
    over = qapi.post(
        "/api/v1/queues", json={"name": "nlp", "parent": "research", "guaranteed": {"": 1}}
    )
    assert over.status_code == 422, over.text
    assert over.json()["error"] == (
        "the children of queue 'research' are guaranteed 3 GPUs together, more than its 2; "
        "raise 'research''s guarantee or lower theirs"
    )
    lowered = qapi.client.patch(
        "/api/v1/queues/research", headers=qapi.admin, json={"guaranteed": {"": 1}}
    )
    assert lowered.status_code == 422 and "more than its 1" in lowered.json()["error"]
    unknown = qapi.post("/api/v1/queues", json={"name": "nlp", "parent": "nope"})
    assert unknown.status_code == 422 and "its parent 'nope' is not a queue" in unknown.text
    assert {n: (q.parent, q.guaranteed) for n, q in queues(qapi).items()} == {
        "research": (None, {"": 2}),
        "vision": ("research", {"": 2}),
    }
    gone = qapi.client.delete("/api/v1/queues/research", headers=qapi.admin)
    assert gone.status_code == 409 and "parent of vision" in gone.json()["error"]
    moved = qapi.client.patch(
        "/api/v1/queues/vision", headers=qapi.admin, json={"clear_parent": True}
    )
    assert moved.status_code == 200 and moved.json()["parent"] is None
    assert qapi.client.delete("/api/v1/queues/research", headers=qapi.admin).status_code == 200
