"""Issue 32 item 6 (live): a queue tree on a real server and a real agent with
4 virtual GPUs. `research` (2 GPUs) has children `vision` and `nlp` guaranteed 1
each; `other` is guaranteed the other 2 and fills the cluster first.

1. vision's backlog arrives while nlp is idle: vision counts nlp's idle part of
   research's guarantee as its own and takes 2 GPUs back from other (as a flat
   queue guaranteed 1 it would take 1).
2. nlp's job arrives: nlp is below its own 1 and takes it back from its
   sibling; other keeps its 2.

Made with the admin CLI (`queue add --parent`); read with `queue list --json`."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_cluster import Cluster
from live_examples import live_cluster, wait_for

from schedulearn.protocol import JobSpec

GRACE = 1.0  # SCHEDULEARN_QUEUE_MIN_RUN_SECONDS: a borrower may be preempted after it
LONG = ["sleep", "600"]


def used(cluster: Cluster) -> dict[str, int]:
    listed = cluster.cli("queue", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {q["name"]: q["used"] for q in json.loads(listed.stdout)["items"] if q["declared"]}


def backlog(cluster: Cluster, queue: str, count: int) -> list[int]:
    with cluster.client() as c:
        spec = JobSpec.model_validate(
            {
                "name": f"{queue}-long",
                "command": LONG,
                "gpus": 1,
                "preemptible": True,
                "queue": queue,
                "count": count,
            }
        )
        return c.submit(spec).ids


def test_a_child_borrows_its_idle_siblings_part_and_gives_it_back(tmp_path: Path) -> None:
    with live_cluster(
        tmp_path, {"gpu4": 4}, SCHEDULEARN_QUEUE_MIN_RUN_SECONDS=str(GRACE)
    ) as cluster:
        for args in (
            ("research", "--guaranteed", "2"),
            ("vision", "--parent", "research", "--guaranteed", "1"),
            ("nlp", "--parent", "research", "--guaranteed", "1"),
            ("other", "--guaranteed", "2"),
        ):
            made = cluster.cli("queue", "add", *args)
            assert made.returncode == 0, made.stderr
        ids = backlog(cluster, "other", 4)
        wait_for("other to fill the cluster", lambda: used(cluster)["other"] == 4, cluster, 60)

        # 1. nlp idle: vision takes its own GPU and nlp's.
        ids += backlog(cluster, "vision", 3)
        wait_for(
            "vision to hold 2 GPUs, other 2",
            lambda: used(cluster) == {"research": 0, "vision": 2, "nlp": 0, "other": 2},
            cluster,
            60,
        )
        listed = json.loads(cluster.cli("queue", "list", "--json").stdout)["items"]
        vision = next(q for q in listed if q["name"] == "vision")
        assert (vision["parent"], vision["guaranteed_gpus"]) == ("research", 2), vision

        # 2. nlp returns: it takes its GPU back from its sibling, not from other.
        ids += backlog(cluster, "nlp", 1)
        wait_for(
            "vision, nlp and other to hold 1, 1 and 2",
            lambda: used(cluster) == {"research": 0, "vision": 1, "nlp": 1, "other": 2},
            cluster,
            60,
        )
        with cluster.client() as c:
            for i in ids:
                c.cancel(i)
