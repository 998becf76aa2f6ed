"""Node capabilities through the user and agent APIs: what a node reports
at registration reaches placement, the submit-time check and the node listing.

Reads send this release's protocol version, as the CLI does: a call without
one is answered as protocol 1, which had no constraints or capabilities.
"""

from __future__ import annotations

from server_api import Api
from wire_agent import WireAgent

from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    CapabilitiesPublic,
    CapabilitiesReport,
    JobPublic,
    NodeList,
    SubmitReply,
)


def current(api: Api) -> dict[str, str]:
    return {**api.admin, PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


def submit(api: Api, body: dict[str, object]) -> int:
    r = api.post("/api/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return SubmitReply.model_validate(r.json()).ids[0]


def placement(api: Api, job_id: int) -> dict[str, list[int]] | None:
    return JobPublic.model_validate(api.get(f"/api/v1/jobs/{job_id}").json()).placement


def test_an_image_job_goes_to_the_node_with_a_container_runtime(api: Api) -> None:
    # The reproduced bug: the plain node is the best fit (1 GPU, nothing left
    # over), so without the rule the image job went there and failed.
    WireAgent(api, "plain", gpus=1).register()
    box = WireAgent(
        api,
        "box",
        gpus=4,
        capabilities=CapabilitiesReport(
            executors=["process", "container"], container_runtime="docker 27.1"
        ),
    )
    box.register()
    image_job = submit(api, {"command": "x", "image": "busybox"})
    batch = box.work_until(lambda b: b.starts)
    assert [a.job_id for a in batch.starts] == [image_job]
    assert placement(api, image_job) == {"box": [0]}
    # A plain job still takes the plain node (best fit): the rule only filters.
    plain_job = submit(api, {"command": "y"})
    WireAgent(api, "plain", gpus=1).work_until(lambda b: b.starts)
    assert placement(api, plain_job) == {"plain": [0]}


def test_an_older_agent_offering_docker_by_name_runs_images(api: Api) -> None:
    WireAgent(api, "plain", gpus=1).register()
    old = WireAgent(api, "old", gpus=2, executors=["subprocess", "docker"])
    old.register()  # no capabilities report: derived from the executors' names
    job = submit(api, {"command": "x", "image": "busybox"})
    old.work_until(lambda b: b.starts)
    assert placement(api, job) == {"old": [0]}


def test_constraints_pick_labelled_nodes_and_impossible_ones_are_refused(api: Api) -> None:
    WireAgent(api, "n1", gpus=1).register()
    ib = WireAgent(api, "n2", gpus=4, capabilities=CapabilitiesReport(labels=["ib", "rack=r1"]))
    ib.register()
    job = submit(api, {"command": "x", "constraints": ["ib"]})
    ib.work_until(lambda b: b.starts)
    assert placement(api, job) == {"n2": [0]}
    shown = JobPublic.model_validate(api.get(f"/api/v1/jobs/{job}", headers=current(api)).json())
    assert shown.model_dump()["constraints"] == ("ib",)

    r = api.post("/api/v1/jobs", json={"command": "x", "constraints": ["a100-80g"]})
    assert r.status_code == 422
    assert "no node has label 'a100-80g'; labels present: ib, rack=r1" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "constraints": ["bad label"]})
    assert r.status_code == 422  # not a label at all: refused by the wire model

    nodes = NodeList.model_validate(api.get("/api/v1/nodes", headers=current(api)).json())
    caps = {n.name: n.capabilities for n in nodes.items}
    assert caps["n2"].labels == ["ib", "rack=r1"]
    assert caps["n1"] == CapabilitiesPublic(executors=["process"], container_runtime="", labels=[])


def test_a_yaml_job_file_carries_constraints(api: Api) -> None:
    WireAgent(api, "n1", gpus=2, capabilities=CapabilitiesReport(labels=["nvme"])).register()
    r = api.post(
        "/api/v1/jobs",
        content=b"command: python train.py\nconstraints: [nvme]\n",
        headers={**current(api), "content-type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    assert SubmitReply.model_validate(r.json()).jobs[0].model_dump()["constraints"] == ("nvme",)
