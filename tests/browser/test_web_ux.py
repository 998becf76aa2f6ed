"""Issue 15, item 10: the dashboard's everyday fixes, in Chromium against a real
server and real agents.

- the log viewer: "No output." only for a job that printed nothing (never above
  its stderr lines), and a finished job's log is never called "live";
- the full log downloads as a text file from the job page;
- a job's reported metrics (loss, accuracy, its own metrics) are charted per
  step on its page, from the progress history;
- switching the policy asks first (dismissing changes nothing);
- `policy preview` as a page;
- a phone (390 px wide): the nav never overflows and no page scrolls sideways.
"""

from __future__ import annotations

import re
import sys

import pytest
from browsing import ADMIN, PHONE, Cluster, Visitor, Visits, screenshot
from playwright.sync_api import Dialog, expect

from waiting import wait_until

pytestmark = pytest.mark.browser

# Every change of the log's status line, from before the page's own script runs.
RECORD_STATUS = """
document.addEventListener("DOMContentLoaded", () => {
  window.__statuses = [];
  const el = document.getElementById("log-status");
  if (!el) return;
  window.__statuses.push(el.textContent);
  new MutationObserver(() => window.__statuses.push(el.textContent))
    .observe(el, {childList: true, characterData: true, subtree: true});
});
"""


def _finished(cluster: Cluster, user: str, command: str, lines: int) -> int:
    """A job that ran `command` and ended, with its `lines` output lines all stored."""
    job_id = cluster.submit(user, name="ux-log", command=command, gpus=1)
    cluster.wait_job(job_id, lambda j: j["state"] == "succeeded", timeout=60)
    with cluster.api() as api:

        def stored() -> int:
            count, after = 0, 0
            while True:
                page = api.get(
                    f"/api/v1/jobs/{job_id}/logs", params={"after": after, "limit": 10000}
                ).json()
                if not page["lines"]:
                    return count
                count += len(page["lines"])
                after = page["next_after"]

        wait_until(stored, 30, f"job {job_id}'s {lines} lines on the server", until=lines.__le__)
    return job_id


def _open_log(v: Visitor, cluster: Cluster, job_id: int) -> None:
    v.page.add_init_script(RECORD_STATUS)
    v.page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(v.page.get_by_test_id("log-status")).to_have_text("ended", timeout=20_000)


def test_a_finished_jobs_log_has_no_false_no_output_and_is_never_live(
    cluster: Cluster, visit: Visits
) -> None:
    stderr_only = _finished(cluster, "ana", "echo 'only on stderr' >&2", 1)
    both = _finished(cluster, "ana", "echo to-stdout; echo to-stderr >&2; echo again", 3)
    silent = _finished(cluster, "ana", "true", 0)
    v = visit(cluster.token_for("ana"))
    log = v.page.get_by_test_id("log")

    _open_log(v, cluster, stderr_only)
    expect(log.locator(".stderr")).to_have_text("only on stderr")
    expect(log).not_to_contain_text("No output.")
    # The status went from loading to ended; it never claimed the log was live.
    statuses = v.page.evaluate("window.__statuses")
    assert "live" not in statuses and statuses[-1] == "ended", statuses

    _open_log(v, cluster, both)
    expect(log.locator(".ln:not(.sys)")).to_have_count(3)
    # The two streams are separate pipes: their lines interleave in either order.
    texts = sorted(log.locator(".ln:not(.sys)").all_inner_texts())
    assert texts == ["again", "to-stderr", "to-stdout"], texts
    expect(log.locator(".stderr")).to_have_text("to-stderr")
    expect(log).not_to_contain_text("No output.")
    assert "live" not in v.page.evaluate("window.__statuses")

    _open_log(v, cluster, silent)
    expect(log.locator(".placeholder")).to_have_text("No output.")
    expect(log.locator(".sys")).to_contain_text("job succeeded, exit code 0")


def test_a_running_jobs_log_is_live_until_it_ends(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit(
        "ana", name="ux-live", command="echo begun >&2; sleep 4; echo done", gpus=1
    )
    v = visit(cluster.token_for("ana"))
    v.page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(v.page.get_by_test_id("log")).to_contain_text("begun", timeout=30_000)
    if cluster.job(job_id)["state"] == "running":
        expect(v.page.get_by_test_id("log-status")).to_have_text("live")
    expect(v.page.get_by_test_id("log-status")).to_have_text("ended", timeout=30_000)
    expect(v.page.get_by_test_id("log")).to_contain_text("done")
    expect(v.page.get_by_test_id("log")).not_to_contain_text("No output.")


def test_the_full_log_downloads_as_a_text_file(cluster: Cluster, visit: Visits) -> None:
    # More lines than the page keeps (5,000) and than one read of the download.
    job_id = _finished(cluster, "ana", "seq 1 12000", 12000)
    v = visit(cluster.token_for("ana"))
    v.page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(v.page.get_by_test_id("log")).to_contain_text("12000", timeout=20_000)
    with v.page.expect_download() as info:
        v.page.get_by_test_id("log-download").click()
    download = info.value
    assert download.suggested_filename == f"job-{job_id}.log"
    text = open(download.path(), encoding="utf-8").read()  # noqa: SIM115
    numbers = [line for line in text.splitlines() if line.isdigit()]
    assert numbers == [str(i) for i in range(1, 12001)]
    # Someone else's job: no download of its output.
    other = visit(cluster.token_for("bob"))
    reply = other.page.request.get(f"{cluster.url}/ui/jobs/{job_id}/log/full")
    assert reply.status == 403 and "only its owner and admins" in reply.text()


REPORTING = """
import time
from schedulearn.runtime import report
for i in range(1, 9):
    report(step=10 * i, loss=1 / i, accuracy=i / 10, lr=0.1 * 0.5 ** i)
    print(f"step {10 * i}", flush=True)
    time.sleep(0.5)
"""


def test_the_job_page_charts_its_reported_metrics_per_step(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit(
        "ana", name="ux-metrics", command=[sys.executable, "-c", REPORTING], gpus=1
    )
    v = visit(cluster.token_for("ana"))
    v.page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    # The chart appears on the open page as reports come in (the live part refreshes).
    expect(v.page.locator('[data-testid=metric-chart][data-metric="loss"]')).to_be_visible(
        timeout=60_000
    )
    cluster.wait_job(job_id, lambda j: j["state"] == "succeeded", timeout=60)
    with cluster.api(cluster.token_for("ana")) as api:
        reports = wait_until(
            lambda: api.get(f"/api/v1/jobs/{job_id}/progress").json()["reports"],
            30,
            "all 8 reports on the server",
            until=lambda r: len(r) == 8,
        )
    v.page.reload()
    charts = v.page.get_by_test_id("metric-charts")
    expect(charts).to_have_attribute("data-x", "step")
    panels = v.page.get_by_test_id("metric-chart")
    expect(panels).to_have_count(3)
    assert [p.get_attribute("data-metric") for p in panels.all()] == ["loss", "accuracy", "lr"]
    for panel in panels.all():
        name = panel.get_attribute("data-metric")
        values = [r.get(name, r.get("metrics", {}).get(name)) for r in reports]
        assert panel.get_attribute("data-count") == "8"
        assert float(panel.get_attribute("data-last-x") or "nan") == 80
        assert float(panel.get_attribute("data-last-y") or "nan") == pytest.approx(values[-1])
        # One line through 8 points, and a dot per report with its figures.
        path = panel.get_by_test_id("metric-line").get_attribute("d") or ""
        assert path.startswith("M") and path.count(" L") == 7
        dots = panel.locator("circle title")
        expect(dots).to_have_count(8)
        expect(dots.first).to_have_text(re.compile(rf"^step 10: {name} "))
    expect(panels.first.locator("circle title").last).to_have_text("step 80: loss 0.125")
    # Loss falls: its last point is drawn lower than its first (SVG y grows downwards).
    ys = [float(c.get_attribute("cy") or "nan") for c in panels.first.locator("circle").all()]
    assert ys == sorted(ys)
    screenshot(v.page, "job-metric-charts")


def test_switching_the_policy_asks_first(cluster: Cluster, visit: Visits) -> None:
    with cluster.api() as api:
        before = api.get("/api/v1/policy").json()["spec"]
    page = visit(ADMIN).page
    page.goto(f"{cluster.url}/ui/policy")
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_test_id("use-srtf").click()
    wait_until(lambda: asked, 10, "the confirmation")
    assert f"from {before} to srtf" in asked[0]
    expect(page.get_by_test_id("current-policy")).to_have_text(before)
    with cluster.api() as api:
        assert api.get("/api/v1/policy").json()["spec"] == before

    # The typed spec is what the question names; accepting switches.
    page.fill("#f-spec", "fifo:backfill=true")

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.get_by_test_id("switch").click()
    expect(page.locator(".notice")).to_contain_text("Policy switched to fifo:backfill=true")
    assert f"from {before} to fifo:backfill=true" in asked[1]
    page.once("dialog", lambda d: d.accept())
    page.fill("#f-spec", before)
    page.get_by_test_id("switch").click()
    expect(page.get_by_test_id("current-policy")).to_have_text(before)


def test_policy_preview_is_a_page(cluster: Cluster, visit: Visits) -> None:
    cluster.cancel_all()
    cluster.wait_idle()
    healthy = sum(len(n["gpus"]) for n in cluster.nodes() if n["healthy"])
    # Fill the cluster: one GPU frees in 5 minutes, the others in an hour. Then
    # queue a 1-hour job and a 1-minute one: FIFO starts the long one on the GPU
    # that frees first, SRTF the short one, which ends its wait far sooner.
    cluster.submit("ana", name="pv-soon", command="sleep 300", gpus=1, estimated_duration="5m")
    for i in range(healthy - 1):
        cluster.submit(
            "ana", name=f"pv-run-{i}", command="sleep 300", gpus=1, estimated_duration="1h"
        )
    waiting = [
        cluster.submit(
            "bob", name="pv-wait-long", command="sleep 300", gpus=1, estimated_duration="1h"
        ),
        cluster.submit(
            "bob", name="pv-wait-short", command="sleep 300", gpus=1, estimated_duration="1m"
        ),
    ]
    with cluster.api() as api:
        wait_until(
            lambda: api.get("/api/v1/jobs", params={"state": "running"}).json()["total"],
            60,
            "the cluster to fill",
            until=lambda n: n >= healthy,
        )
        policy = api.get("/api/v1/policy").json()
    assert all(cluster.job(j)["state"] == "pending" for j in waiting)

    page = visit(cluster.token_for("ana")).page
    page.goto(f"{cluster.url}/ui/policy")
    page.get_by_test_id("preview-link").click()
    expect(page).to_have_url(re.compile(r"/ui/policy/preview$"))
    rows = page.get_by_test_id("preview-row")
    expect(rows).to_have_count(len(policy["available"]))
    expect(page.locator("[data-testid=preview-row][data-in-force]")).to_have_count(1)
    expect(page.locator("[data-testid=preview-row][data-in-force]")).to_contain_text(policy["spec"])
    expect(page.get_by_test_id("preview-summary")).to_contain_text("2 waiting")
    # FIFO predicts every job's end here (all have estimates).
    expect(
        page.locator('[data-testid=preview-row][data-spec^="fifo"]').get_by_test_id("predicted")
    ).to_have_text(f"{healthy + 2} of {healthy + 2}")
    # A user sees the figures but no switch.
    expect(page.get_by_test_id("preview-use")).to_have_count(0)
    screenshot(page, "policy-preview")

    # Chosen policies, and a bad one named back with the valid names.
    page.fill("#f-policies", "fifo, srtf")
    page.get_by_test_id("preview").click()
    expect(rows).to_have_count(2)
    assert [r.get_attribute("data-spec") for r in rows.all()] == ["fifo", "srtf"]
    # SRTF starts the 1-minute job before the 1-hour one: a lower mean JCT than FIFO.
    expect(page.locator('[data-testid=preview-row][data-spec="srtf"]')).to_contain_text(
        "lowest JCT"
    )
    page.fill("#f-policies", "fifo, nonsense")
    page.get_by_test_id("preview").click()
    error = page.get_by_test_id("error-policies")
    expect(error).to_contain_text("nonsense")
    expect(error).to_contain_text("srtf")
    expect(page.locator("#f-policies")).to_have_value("fifo, nonsense")

    # An admin can switch from a row, after confirming.
    admin = visit(ADMIN).page
    admin.goto(f"{cluster.url}/ui/policy/preview?policies=fifo,srtf")
    others = admin.locator("[data-testid=preview-row]:not([data-in-force])")
    expect(others.first.get_by_test_id("preview-use")).to_be_visible()
    cluster.cancel_all()


PHONE_PAGES = ("cluster", "queue", "jobs", "submit", "policy", "policy/preview", "metrics")


def test_a_phone_gets_a_usable_layout(cluster: Cluster, visit: Visits) -> None:
    job_id = cluster.submit(
        "ana",
        name="a-rather-long-job-name-for-a-small-screen",
        command=[sys.executable, "-c", REPORTING],
        gpus=1,
    )
    cluster.wait_job(job_id, lambda j: j["state"] == "succeeded", timeout=60)
    v = visit(cluster.token_for("ana"), viewport=PHONE)
    page = v.page
    for name in (*PHONE_PAGES, f"jobs/{job_id}"):
        page.goto(f"{cluster.url}/ui/{name}")
        expect(page.locator("main h1").first).to_be_visible()
        # Nothing widens the page past the phone's width...
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"/ui/{name} is {width} px wide on a 390 px phone"
        # ...and every page of the nav is on screen, whole, with no sideways scrolling.
        links = page.locator("header nav a")
        assert links.count() >= 6
        for link in links.all():
            box = link.bounding_box()
            assert box is not None and box["x"] >= 0, name
            assert box["x"] + box["width"] <= PHONE["width"], f"{link.inner_text()} off screen"
        nav_scroll = page.evaluate(
            "(() => { const n = document.querySelector('header nav');"
            " return n.scrollWidth - n.clientWidth; })()"
        )
        assert nav_scroll <= 0, f"the nav scrolls sideways on /ui/{name}"
        screenshot(page, f"phone-{name.replace('/', '-')}")
    # The nav works by touch-size taps: go to Jobs from the job page.
    page.locator("header nav a", has_text="Jobs").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs$"))
    # The job's charts fit the phone's width.
    page.goto(f"{cluster.url}/ui/jobs/{job_id}")
    chart = page.get_by_test_id("metric-chart").first
    box = chart.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
