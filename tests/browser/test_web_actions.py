"""The web's job and node actions, as the CLI has them (issue 35, item 5): hold and
release, priority, resubmit, cancel of selected jobs, node drain and resume with
a reason (admins only); and the Jobs and Queue tables at 1280 px and on a phone.

Every action is checked through the API afterwards: the page's word is not
taken for what the server did. Jobs kept pending wait on a dependency
(`afterok:` a job that sleeps), so they wait whatever the cluster's load.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browsing import ADMIN, PHONE, Cluster, Visits, screenshot
from playwright.sync_api import Page, ViewportSize, expect

from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
WIDE: ViewportSize = {"width": 1280, "height": 800}


def api(cluster: Cluster, token: str = ADMIN) -> httpx.Client:
    """The API as this version's clients speak it (`Cluster.api` speaks protocol 1,
    whose replies leave out what came later: `held`, `drained`, `drain_reason`)."""
    return httpx.Client(
        base_url=cluster.url,
        headers={"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)},
        timeout=10,
    )


def job(cluster: Cluster, job_id: int) -> dict[str, Any]:
    with api(cluster) as client:
        reply = client.get(f"/api/v1/jobs/{job_id}")
        reply.raise_for_status()
        return dict(reply.json())


def node(cluster: Cluster, name: str) -> dict[str, Any]:
    with api(cluster) as client:
        items = client.get("/api/v1/nodes").raise_for_status().json()["items"]
    return dict(next(n for n in items if n["name"] == name))


@pytest.fixture(autouse=True)
def nothing_left(cluster: Cluster) -> Iterator[None]:
    """Each test leaves no job unfinished and every node resumed."""
    yield
    cluster.cancel_all()
    with api(cluster) as client:
        for shown in client.get("/api/v1/nodes").raise_for_status().json()["items"]:
            if shown["drained"]:
                client.post(f"/api/v1/nodes/{shown['name']}/resume").raise_for_status()


def waiting_jobs(cluster: Cluster, user: str, count: int, **spec: object) -> tuple[int, list[int]]:
    """A job that sleeps, and `count` jobs of `user` that wait for it to succeed."""
    blocker = cluster.submit(user, name="blocker", command=SLEEP, gpus=0)
    waiting = [
        cluster.submit(
            user,
            command=["true"],
            gpus=1,
            dependency=f"afterok:{blocker}",
            **{"name": f"waits-{i}", **spec},
        )
        for i in range(count)
    ]
    for job_id in waiting:
        cluster.wait_job(job_id, lambda j: j["state"] == "pending")
    return blocker, waiting


def accept_dialogs(page: Page) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def no_sideways_scroll(page: Page, selector: str) -> tuple[int, int]:
    """(scrollWidth, clientWidth) of the element `selector` names."""
    sizes = page.evaluate(
        "(s) => { const e = document.querySelector(s); return [e.scrollWidth, e.clientWidth]; }",
        selector,
    )
    return int(sizes[0]), int(sizes[1])


def test_hold_then_release_from_the_job_page(cluster: Cluster, visit: Visits) -> None:
    _, (job_id,) = waiting_jobs(cluster, "ana", 1)
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")

    page.get_by_test_id("hold").click()
    expect(page.get_by_role("status")).to_contain_text(f"Job {job_id} is held")
    assert job(cluster, job_id)["held"] is True
    expect(page.get_by_test_id("job-held")).to_be_visible()
    # Held, the job's reason says so, on the Jobs page too.
    page.goto(f"{cluster.url}/ui/jobs")
    row = page.locator(f'[data-testid=job-row][data-job="{job_id}"]')
    expect(row.get_by_test_id("held")).to_be_visible()
    expect(row.get_by_test_id("job-reason")).to_contain_text("held")

    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    page.get_by_test_id("release").click()
    expect(page.get_by_role("status")).to_contain_text(f"Job {job_id} is released")
    assert job(cluster, job_id)["held"] is False
    expect(page.get_by_test_id("hold")).to_be_visible()


def test_change_a_jobs_priority(cluster: Cluster, visit: Visits) -> None:
    _, (job_id,) = waiting_jobs(cluster, "ana", 1)
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    # A user's range holds as in the API (users get -100..0 by default).
    page.get_by_test_id("priority-input").fill("7")
    page.get_by_test_id("set-priority").click()
    expect(page.locator("main")).to_contain_text("priority 7 is outside the range you may use")
    assert job(cluster, job_id)["priority"] == 0

    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    page.get_by_test_id("priority-input").fill("-5")
    page.get_by_test_id("set-priority").click()
    expect(page.get_by_role("status")).to_contain_text(f"Job {job_id} now has priority -5")
    expect(page.get_by_test_id("priority")).to_have_text("-5")
    assert job(cluster, job_id)["priority"] == -5

    # Another user sees no actions on it, and the server refuses a forged form.
    bob = visit(cluster.token_for("bob")).page
    bob.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(bob.get_by_test_id("job-state")).to_be_visible()
    expect(bob.get_by_test_id("job-actions")).to_have_count(0)
    bob.goto(f"{cluster.url}/ui/jobs")
    token = bob.locator("input[name=csrf]").first.get_attribute("value") or ""
    refused = bob.request.post(
        f"{cluster.url}/ui/jobs/{job_id}/priority", form={"priority": "99", "csrf": token}
    )
    assert refused.status == 403, refused.status
    assert "you may update only your own jobs" in refused.text()
    assert job(cluster, job_id)["priority"] == -5


def test_resubmit_a_finished_job(cluster: Cluster, visit: Visits) -> None:
    first = cluster.submit(
        "ana", name="again", command=[sys.executable, "-c", "print('hi')"], gpus=1, priority=-3
    )
    cluster.wait_job(first, lambda j: j["state"] == "succeeded", timeout=60)
    page = visit(cluster.token_for("ana")).page
    accept_dialogs(page)
    page.goto(f"{cluster.url}/ui/jobs/{first}")
    page.get_by_test_id("resubmit").click()
    expect(page.get_by_role("status")).to_contain_text(f"again: job {first}")
    page.wait_for_url(re.compile(r"/ui/jobs/\d+$"))
    again = int(page.url.rsplit("/", 1)[1])
    assert again != first
    new, old = job(cluster, again), job(cluster, first)
    assert (new["user"], new["name"], new["command"], new["gpus"], new["priority"]) == (
        old["user"],
        old["name"],
        old["command"],
        old["gpus"],
        old["priority"],
    )
    cluster.wait_job(again, lambda j: j["state"] == "succeeded", timeout=60)


def test_cancel_two_selected_jobs_and_leave_the_third(cluster: Cluster, visit: Visits) -> None:
    blocker, (one, two, three) = waiting_jobs(cluster, "ana", 3)
    others = cluster.submit("bob", name="bobs", command=SLEEP, gpus=0)
    page = visit(cluster.token_for("ana")).page
    accept_dialogs(page)
    page.goto(f"{cluster.url}/ui/jobs?state=active")
    # Only the viewer's own unfinished jobs can be ticked.
    expect(
        page.locator(f'[data-testid=job-row][data-job="{others}"] [data-testid=select-job]')
    ).to_have_count(0)
    for job_id in (one, three):
        page.locator(f'[data-testid=job-row][data-job="{job_id}"] [data-testid=select-job]').check()
    page.get_by_test_id("cancel-selected").click()
    expect(page.get_by_role("status")).to_contain_text(f"Cancelled jobs {one}, {three}")
    expect(page).to_have_url(re.compile(r"/ui/jobs\?state=active"))
    assert [job(cluster, i)["state"] for i in (one, two, three, blocker)] == [
        "cancelled",
        "pending",
        "cancelled",
        "running",
    ]
    # Another user's job named in a forged form is refused, and stays as it was.
    token = page.locator("#bulk input[name=csrf]").get_attribute("value") or ""
    reply = page.request.post(
        f"{cluster.url}/ui/jobs/cancel-selected",
        form={"job": str(others), "csrf": token, "back": "/ui/jobs"},
    )
    assert reply.ok
    assert f"Job {others}: job {others} belongs to bob" in reply.text()
    assert job(cluster, others)["state"] == "running"


def test_drain_a_node_with_a_reason_then_resume_it(cluster: Cluster, visit: Visits) -> None:
    page = visit(ADMIN).page
    accept_dialogs(page)
    page.goto(f"{cluster.url}/ui/cluster")
    row = page.locator('[data-testid=node-admin-row][data-node="gpu-node-c"]')
    row.get_by_test_id("node-drain-reason-input").fill("fan replacement")
    row.get_by_test_id("node-drain").click()
    expect(page.get_by_role("status")).to_contain_text("Node gpu-node-c is drained")
    shown = node(cluster, "gpu-node-c")
    assert (shown["drained"], shown["drain_reason"]) == (True, "fan replacement")
    card = page.locator('[data-testid=node][data-node="gpu-node-c"]')
    expect(card.get_by_test_id("node-drained")).to_be_visible()
    expect(card.get_by_test_id("node-drain-reason")).to_contain_text("fan replacement")
    # The live part, redrawn, still says why.
    with page.expect_response(
        lambda r: r.url.endswith("/ui/cluster") and r.request.headers.get("hx-request") == "true"
    ):
        pass
    expect(card.get_by_test_id("node-drain-reason")).to_contain_text("fan replacement")
    screenshot(page, "cluster-drained")

    row.get_by_test_id("node-resume").click()
    expect(page.get_by_role("status")).to_contain_text("Node gpu-node-c is resumed")
    shown = node(cluster, "gpu-node-c")
    assert (shown["drained"], shown["drain_reason"]) == (False, "")
    expect(card.get_by_test_id("node-drained")).to_have_count(0)


def test_a_user_can_neither_see_nor_use_drain(cluster: Cluster, visit: Visits) -> None:
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/cluster")
    expect(page.get_by_test_id("node").first).to_be_visible()
    expect(page.get_by_test_id("node-admin")).to_have_count(0)
    expect(page.get_by_test_id("node-drain")).to_have_count(0)
    page.goto(f"{cluster.url}/ui/jobs")
    token = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    refused = page.request.post(
        f"{cluster.url}/ui/nodes/gpu-node-a/drain", form={"reason": "mine now", "csrf": token}
    )
    assert refused.status == 403, refused.status
    assert "only an admin may drain a node" in refused.text()
    assert not node(cluster, "gpu-node-a")["drained"]


def test_the_jobs_table_fits_1280_px_with_an_array_column(cluster: Cluster, visit: Visits) -> None:
    long_command = [
        sys.executable,
        "-c",
        "import sys; print('a fairly long command line', sys.argv)",
    ]
    with api(cluster, cluster.token_for("ana")) as client:
        reply = client.post(
            "/api/v1/jobs",
            json={"name": "sweep", "command": long_command, "gpus": 1, "count": 3},
        )
        assert reply.status_code == 201, reply.text
        array = [int(i) for i in reply.json()["ids"]]
    for job_id in array:
        cluster.wait_job(job_id, lambda j: j["state"] == "succeeded", timeout=60)
    # Long words the table must wrap: a name with no spaces, a placement of 4 GPUs.
    failed = cluster.submit(
        "ana",
        name="a-long-job-name-with-no-spaces-from-a-hyperparameter-sweep-lr-0.0003-run-0042",
        command=["false"],
        gpus=4,
    )
    cluster.wait_job(failed, lambda j: j["state"] == "failed", timeout=60)
    waiting_jobs(cluster, "ana", 1, name="waits-for-its-dependency")

    page = visit(cluster.token_for("ana"), viewport=WIDE).page
    page.goto(f"{cluster.url}/ui/jobs")
    scroll, inner = no_sideways_scroll(page, "[data-testid=jobs-wrap]")
    assert scroll <= inner, f"the Jobs table is {scroll} px wide in {inner} px at 1280 px"
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDE["width"]
    exit_head = page.locator("[data-testid=jobs] th", has_text="Exit")
    box = exit_head.bounding_box()
    assert box is not None and box["x"] + box["width"] <= WIDE["width"], box
    for index, job_id in enumerate(array):
        row = page.locator(f'[data-testid=job-row][data-job="{job_id}"]')
        expect(row.get_by_test_id("job-array")).to_have_text(f"{array[0]}_{index}")
        expect(row.get_by_test_id("job-exit")).to_have_text("0")
    expect(
        page.locator(f'[data-testid=job-row][data-job="{failed}"] [data-testid=job-exit]')
    ).to_have_text("1")
    expect(
        page.locator(f'[data-testid=job-row][data-job="{failed}"] [data-testid=job-array]')
    ).to_have_text("—")
    screenshot(page, "jobs-1280")


def _on_screen(page: Page, locator_text: str, width: int) -> None:
    box = page.locator(locator_text).first.bounding_box()
    assert box is not None, locator_text
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (locator_text, box)


def test_a_phone_shows_each_jobs_state_and_reason(cluster: Cluster, visit: Visits) -> None:
    blocker, (job_id,) = waiting_jobs(cluster, "ana", 1, name="a-long-name-that-waits-on-a-phone")
    page = visit(cluster.token_for("ana"), viewport=PHONE).page

    page.goto(f"{cluster.url}/ui/jobs")
    row = f'[data-testid=job-row][data-job="{job_id}"]'
    expect(page.locator(f"{row} [data-testid=job-state] .pill")).to_have_text("pending")
    expect(page.locator(f"{row} [data-testid=job-reason]")).to_contain_text(
        f"waits for job {blocker} to succeed"
    )
    _on_screen(page, f"{row} [data-testid=job-state] .pill", PHONE["width"])
    _on_screen(page, f"{row} [data-testid=job-reason]", PHONE["width"])
    scroll, inner = no_sideways_scroll(page, "[data-testid=jobs-wrap]")
    assert scroll <= inner, f"the Jobs table scrolls sideways on a phone ({scroll} > {inner})"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-jobs-cards")

    page.goto(f"{cluster.url}/ui/queue")
    row = f'[data-testid=queue-row][data-job="{job_id}"]'
    expect(page.locator(f"{row} [data-testid=queue-state]")).to_have_text("pending")
    expect(page.locator(f"{row} [data-testid=queue-reason]")).to_contain_text(
        f"waits for job {blocker} to succeed"
    )
    _on_screen(page, f"{row} [data-testid=queue-state]", PHONE["width"])
    _on_screen(page, f"{row} [data-testid=queue-reason]", PHONE["width"])
    wrap = page.locator("#queue-live .table-wrap")
    sizes = wrap.evaluate("(e) => [e.scrollWidth, e.clientWidth]")
    assert sizes[0] <= sizes[1], f"the Queue table scrolls sideways on a phone ({sizes})"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-queue-cards")
