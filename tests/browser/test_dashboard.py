"""The web dashboard in a real browser, against a real server and real agents.

Each test drives Chromium through the pages as a user or an admin would:
sign in with a token, submit through the form, watch the job start and its
output stream in without a reload, cancel a job, switch the policy as an
admin and be refused as a user. Every page visited is checked to request
nothing but the server, and the tests save screenshots of every page with
real data (see browsing.SCREENSHOTS).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from browsing import ADMIN, Cluster, Visits, screenshot
from playwright.sync_api import expect

from waiting import wait_until

pytestmark = pytest.mark.browser

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"
PAGES = ("cluster", "queue", "queues", "jobs", "submit", "policy", "metrics")


def test_sign_in_with_a_token(cluster: Cluster, visit: Visits) -> None:
    page = visit(None).page
    page.goto(f"{cluster.url}/ui/jobs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/jobs"))
    screenshot(page, "login")
    page.fill("#token", "not-a-token")
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_contain_text("Unknown token")
    page.fill("#token", cluster.token_for("ana"))
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/jobs$"))
    expect(page.get_by_test_id("who")).to_have_text("ana")
    # An agent token runs agents, not browsers.
    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    page.fill("#token", "browser-agent-token")
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_contain_text("agent token")


def test_submit_by_form_and_watch_the_log_stream_in(cluster: Cluster, visit: Visits) -> None:
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/submit")

    # Errors show beside the field they are about, and nothing is submitted.
    page.fill("#f-command", "")
    page.fill("#f-gpus", "64")
    page.fill("#f-memory", "lots")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-command")).to_contain_text("Give a command")
    expect(page.get_by_test_id("error-memory")).to_contain_text("not a size")
    page.fill("#f-command", "echo never")
    page.fill("#f-memory", "")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-gpus")).to_contain_text("no node has 64 GPUs")
    expect(page.locator("#f-command")).to_have_value("echo never")  # what was typed stays
    screenshot(page, "submit")

    # A job that prints 60 lines, a tenth of a second apart.
    page.fill("#f-name", "form-job")
    page.fill(
        "#f-command",
        'for i in $(seq 1 60); do echo "epoch $i loss 0.$((100 - i))"; sleep 0.1; done; '
        'echo "saved checkpoint" >&2',
    )
    page.fill("#f-gpus", "2")
    page.fill("#f-env", "MODE=test")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    page.evaluate("window.__notReloaded = true")

    job = cluster.job(job_id)
    assert job["name"] == "form-job" and job["gpus"] == 2 and job["env"] == {"MODE": "test"}
    assert job["user"] == "ana"

    log = page.get_by_test_id("log")
    expect(page.get_by_test_id("job-state")).to_have_text("running", timeout=20_000)
    expect(log).to_contain_text("epoch 1 loss", timeout=20_000)
    # Part of the output is there while the job still runs: the page follows it live.
    partial = log.inner_text()
    assert "epoch 60 " not in partial, "the whole log arrived at once; it should stream"
    expect(page.get_by_test_id("placement")).to_contain_text("gpu-node-")
    expect(log).to_contain_text("epoch 60 loss 0.40", timeout=30_000)
    expect(log).to_contain_text("saved checkpoint")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=20_000)
    expect(page.get_by_test_id("exit-code")).to_contain_text("0")
    expect(page.get_by_test_id("log-status")).to_have_text("ended")
    assert page.evaluate("window.__notReloaded === true"), "the page reloaded"
    lines = [ln for ln in log.inner_text().splitlines() if ln.startswith("epoch ")]
    assert lines == [f"epoch {i} loss 0.{100 - i}" for i in range(1, 61)]
    timeline = page.get_by_test_id("timeline").inner_text()
    assert timeline.index("pending") < timeline.index("running") < timeline.index("succeeded")
    screenshot(page, "job-detail")


def test_cancel_a_running_job(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit("ana", name="long-run", command="echo started; sleep 300", gpus=1)
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(page.get_by_test_id("job-state")).to_have_text("running", timeout=20_000)
    expect(page.get_by_test_id("log")).to_contain_text("started")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel").click()
    expect(page.locator(".notice")).to_contain_text(f"Job {job_id}")
    expect(page.get_by_test_id("job-state")).to_have_text("cancelled", timeout=20_000)
    expect(page.get_by_test_id("cancel")).to_have_count(0)
    assert cluster.job(job_id)["state"] == "cancelled"


def test_a_user_may_not_cancel_someone_elses_job(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit("ana", name="anas-job", command="sleep 300", gpus=1)
    page = visit(cluster.token_for("bob")).page
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel").click()
    expect(page.get_by_test_id("error")).to_contain_text("you may cancel only your own jobs")
    assert cluster.job(job_id)["state"] != "cancelled"
    cluster.cancel_all()


def test_cluster_queue_and_jobs_pages_are_live(cluster: Cluster, visit: Visits) -> None:
    cluster.cancel_all()
    cluster.wait_idle()
    # A node that stops answering is marked down, and stands out on the Cluster page.
    cluster.agents["gpu-node-c"].kill()
    cluster.wait_node_down("gpu-node-c")
    # Fill the two 4-GPU nodes that are left, then queue jobs that cannot start yet.
    running = [
        cluster.submit("ana", name="resnet50-sweep", command="sleep 300", gpus=2),
        cluster.submit("bob", name="bert-finetune", command="sleep 300", gpus=2),
        cluster.submit("carol", name="gpt-small", command="sleep 300", gpus=3),
        cluster.submit("ana", name="vit-tiny", command="sleep 300", gpus=1),
    ]
    for job_id in running:
        cluster.wait_job(job_id, lambda j: j["state"] == "running")
    waiting = [
        cluster.submit("bob", name="llama-pretrain", command="sleep 300", gpus=4),
        cluster.submit("carol", name="ablation-3", command="sleep 300", gpus=2),
    ]
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/queue")
    rows = page.get_by_test_id("queue-row")
    expect(rows).to_have_count(len(waiting))
    expect(rows.nth(0)).to_have_attribute("data-job", str(waiting[0]))
    expect(rows.nth(0)).to_contain_text("needs 4 GPUs on one node; the most free on any node is 0")
    expect(rows.nth(1)).to_have_attribute("data-job", str(waiting[1]))
    expect(rows.nth(1)).to_contain_text("1 job ahead")
    screenshot(page, "queue")

    page.goto(f"{cluster.url}/ui/cluster")
    for job_id in running:
        expect(page.locator(f'[data-testid=gpu][data-job="{job_id}"]').first).to_be_visible()
    expect(page.locator("[data-testid=gpu][data-job]")).to_have_count(8)
    expect(page.get_by_test_id("node-down")).to_have_count(1)
    expect(page.locator('[data-node="gpu-node-c"]')).to_have_class(re.compile("down"))
    expect(page.get_by_test_id("gpus-busy")).to_contain_text("8 / 8")
    screenshot(page, "cluster")

    # The page refreshes itself: a job that ends leaves the grid without a reload,
    # and the queue moves up.
    page.evaluate("window.__notReloaded = true")
    with cluster.api() as api:
        api.post(f"/api/v1/jobs/{running[0]}/cancel").raise_for_status()
    expect(page.locator(f'[data-testid=gpu][data-job="{running[0]}"]')).to_have_count(
        0, timeout=20_000
    )
    assert page.evaluate("window.__notReloaded === true")

    page.goto(f"{cluster.url}/ui/jobs")
    expect(page.locator(f'[data-testid=job-row][data-job="{running[0]}"]')).to_have_attribute(
        "data-state", re.compile("cancelled|running")
    )
    screenshot(page, "jobs")
    page.goto(f"{cluster.url}/ui/jobs?state=running")
    expect(page.get_by_test_id("job-row").first).to_be_visible()
    for row in page.get_by_test_id("job-row").all():
        assert row.get_attribute("data-state") == "running"
    page.goto(f"{cluster.url}/ui/jobs?user=carol")
    expect(page.get_by_test_id("job-row").first).to_be_visible()
    for row in page.get_by_test_id("job-row").all():
        assert "carol" in row.inner_text()
    cluster.cancel_all()


def test_jobs_list_pages_and_filters(cluster: Cluster, visit: Visits) -> None:
    with cluster.api(cluster.token_for("dora")) as api:
        reply = api.post(
            "/api/v1/jobs", json={"name": "array-run", "command": "echo x", "gpus": 1, "count": 30}
        )
        assert reply.status_code == 201, reply.text
    ids = reply.json()["ids"]
    for job_id in (ids[0], ids[-1]):
        cluster.wait_job(job_id, lambda j: j["state"] == "succeeded")
    page = visit(cluster.token_for("dora")).page
    page.goto(f"{cluster.url}/ui/jobs?name=array-run")
    expect(page.get_by_test_id("job-row")).to_have_count(25)
    expect(page.get_by_test_id("pager")).to_contain_text("1\u201325 of 30")
    page.click("a[rel=next]")
    expect(page.get_by_test_id("job-row")).to_have_count(5)
    expect(page.get_by_test_id("pager")).to_contain_text("26\u201330 of 30")
    page.goto(f"{cluster.url}/ui/jobs?name=no-such-job")
    expect(page.get_by_test_id("jobs-empty")).to_contain_text("No job matches")


def test_policy_switch_is_for_admins_only(cluster: Cluster, visit: Visits) -> None:
    with cluster.api() as api:
        before = api.get("/api/v1/policy").json()["spec"]

    user = visit(cluster.token_for("ana")).page
    user.on("dialog", lambda dialog: dialog.accept())  # every switch asks first (test_web_ux)
    user.goto(f"{cluster.url}/ui/policy")
    expect(user.get_by_test_id("admin-only")).to_be_visible()
    expect(user.get_by_test_id("switch-form")).to_have_count(0)
    expect(user.get_by_test_id("use-srtf")).to_be_disabled()
    # Even a forged submission (the button re-enabled by hand) is refused by the server.
    user.eval_on_selector("[data-testid=use-srtf]", "b => b.disabled = false")
    user.get_by_test_id("use-srtf").click()
    expect(user.get_by_test_id("error")).to_contain_text("only an admin may switch the policy")
    with cluster.api() as api:
        assert api.get("/api/v1/policy").json()["spec"] == before

    admin = visit(ADMIN).page
    admin.on("dialog", lambda dialog: dialog.accept())
    admin.goto(f"{cluster.url}/ui/policy")
    expect(admin.get_by_test_id("current-policy")).to_have_text(before)
    # Every registered policy is described.
    with cluster.api() as api:
        names = api.get("/api/v1/policy").json()["available"]
    expect(admin.get_by_test_id("policy")).to_have_count(len(names))
    admin.fill("#f-spec", "fifo:speed=11")
    admin.get_by_test_id("switch").click()
    expect(admin.get_by_test_id("error-spec")).to_contain_text("has no option speed")
    admin.fill("#f-spec", "fifo:backfill=true")
    admin.get_by_test_id("switch").click()
    expect(admin.locator(".notice")).to_contain_text("Policy switched to fifo:backfill=true")
    expect(admin.get_by_test_id("current-policy")).to_have_text("fifo:backfill=true")
    with cluster.api() as api:
        assert api.get("/api/v1/policy").json()["spec"] == "fifo:backfill=true"
        wait_until(
            lambda: api.get("/healthz").json()["policy"],
            10,
            "the scheduler to take the new policy",
            until="fifo:backfill=true".__eq__,
        )
    admin.get_by_test_id("use-srtf").click()
    expect(admin.get_by_test_id("current-policy")).to_have_text("srtf")
    screenshot(admin, "policy")
    admin.fill("#f-spec", before)
    admin.get_by_test_id("switch").click()
    expect(admin.get_by_test_id("current-policy")).to_have_text(before)


def test_metrics_charts_draw_from_the_job_history(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit("ana", name="quick", command="echo done", gpus=1)
    cluster.wait_job(job_id, lambda j: j["state"] == "succeeded")
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/metrics?window=15m")
    finished = int(page.get_by_test_id("finished").inner_text())
    assert finished >= 1
    for chart in ("chart-util", "chart-queue", "chart-jct"):
        expect(page.get_by_test_id(chart).locator("canvas")).to_have_count(1)
    screenshot(page, "metrics")


def test_every_page_loads_everything_from_the_server_alone(cluster: Cluster, visit: Visits) -> None:
    """The `visit` fixture fails the test if any page asked another host."""
    job_id = cluster.submit("ana", name="tiny", command="echo hello from a tiny job", gpus=1)
    cluster.wait_job(job_id, lambda j: j["state"] == "succeeded")
    v = visit(cluster.token_for("ana"))
    for name in PAGES:
        v.page.goto(f"{cluster.url}/ui/{name}")
        expect(v.page.locator("main h1").first).to_be_visible()
    v.page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(v.page.get_by_test_id("log")).to_contain_text("hello from a tiny job")
    statics = [u for u in v.requested if "/ui/static/" in u]
    assert any(u.endswith("htmx.min.js") for u in statics)
    assert any(u.endswith("uPlot.iife.min.js") for u in statics)


def test_a_training_scripts_progress_shows_on_its_job_page(cluster: Cluster, visit: Visits) -> None:
    """Issue 5, done-when 5 (the web half): the digits example reports through the
    runtime library; its page shows the epoch, loss and accuracy it logged."""
    cluster.cancel_all()
    cluster.wait_idle()
    args = ("--epochs", "4", "--sleep-per-step", "0.03")  # about 3 s an epoch
    job_id = cluster.submit(
        "ana", name="digits", command=[sys.executable, str(DIGITS), *args], gpus=1
    )
    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    progress = page.get_by_test_id("progress")
    # The live part follows the run without a reload: progress while it runs, then the end.
    expect(progress).to_contain_text("epoch", timeout=60_000)
    expect(page.get_by_test_id("job-state")).to_have_text("running")
    expect(progress).to_contain_text("epoch 4", timeout=60_000)
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=30_000)
    expect(progress).to_contain_text("100%")
    shown = progress.inner_text()
    logged = re.search(
        r"epoch 4/4 loss=([.\d]+) accuracy=([.\d]+)", page.get_by_test_id("log").inner_text()
    )
    assert logged, page.get_by_test_id("log").inner_text()
    for name, value in zip(("loss", "accuracy"), logged.groups(), strict=True):
        figure = re.search(rf"{name} ([-+.\de]+)", shown)
        assert figure, shown
        assert float(figure.group(1)) == pytest.approx(float(value), abs=6e-4), shown
    screenshot(page, "job-progress")


def test_empty_states_say_what_to_do(visit_empty: Visits) -> None:
    page = visit_empty(ADMIN).page
    base = page.url.split("/ui/")[0]
    expect(page.get_by_test_id("no-nodes")).to_contain_text("No node has joined yet")
    expect(page.get_by_test_id("no-nodes")).to_contain_text("schedulearn agent --server")
    screenshot(page, "cluster-empty")
    page.goto(f"{base}/ui/queue")
    expect(page.get_by_test_id("queue-empty")).to_contain_text("Nothing is waiting")
    page.goto(f"{base}/ui/jobs")
    expect(page.get_by_test_id("jobs-empty")).to_contain_text("No jobs yet")
    page.goto(f"{base}/ui/metrics")
    expect(page.get_by_test_id("metrics-empty")).to_contain_text("Nothing ran")
    page.goto(f"{base}/ui/jobs/12345")
    expect(page.get_by_test_id("error")).to_contain_text("no job 12345")
