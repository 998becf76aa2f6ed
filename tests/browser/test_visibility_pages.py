"""The visibility model on the web pages, in Chromium, as the owner and as another user.

Alice submits through the form with a secret environment variable; her job
page shows its command, env, output (the hash of the secret, which proves the
job saw it) and the secret's key, never its value. Bob sees the job in the
lists and its page with its state and placement, but the page says its
details are hidden and whose job it is, shows no command, env or output, and
its log stream is refused.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from browsing import Cluster, Visits, screenshot
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SECRET = "web-s3cret-61f0"
WANDB = "wandb-web-key-8842"
MARKER = "alices-private-output"


def test_another_user_sees_no_command_env_or_output(cluster: Cluster, visit: Visits) -> None:
    alice = visit(cluster.token_for("alice")).page
    alice.goto(f"{cluster.url}/ui/submit")
    alice.fill("#f-name", "alices-run")
    alice.fill("#f-command", f'echo {MARKER}; printf %s "$TOKEN" | sha256sum')
    alice.fill("#f-gpus", "1")
    alice.fill("#f-env", f"WANDB_API_KEY={WANDB}")
    alice.fill("#f-secret_env", f"TOKEN={SECRET}")
    alice.get_by_test_id("submit").click()
    expect(alice).to_have_url(re.compile(r"/ui/jobs/\d+$"))
    job_id = int(alice.url.rsplit("/", 1)[1])
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    expect(alice.get_by_test_id("log")).to_contain_text(digest, timeout=30_000)
    expect(alice.get_by_test_id("job-state")).to_have_text("succeeded", timeout=20_000)
    expect(alice.get_by_test_id("command")).to_contain_text(MARKER)
    expect(alice.get_by_test_id("secret-env")).to_have_text("secret (never shown)")
    own_page = alice.content()
    assert WANDB in own_page and "TOKEN" in own_page
    screenshot(alice, "job-detail-owner-secret")

    bob = visit(cluster.token_for("bob")).page
    bob.goto(f"{cluster.url}/ui/jobs/{job_id}")
    expect(bob.get_by_test_id("job-state")).to_have_text("succeeded")
    expect(bob.get_by_test_id("placement")).to_contain_text("gpu-node-")
    note = f"job {job_id} belongs to alice"
    expect(bob.get_by_test_id("command-hidden")).to_contain_text(note)
    expect(bob.get_by_test_id("details-hidden")).to_contain_text("Output hidden")
    expect(bob.get_by_test_id("log")).to_have_count(0)
    expect(bob.get_by_test_id("command")).to_have_count(0)
    theirs = bob.content()
    assert "alices-run" in theirs and MARKER not in theirs and WANDB not in theirs
    assert digest not in theirs
    screenshot(bob, "job-detail-hidden")
    # The stream the owner's page reads is refused to Bob.
    stream = bob.request.get(f"{cluster.url}/ui/jobs/{job_id}/log")
    assert stream.status == 403 and note in stream.text()
    assert MARKER not in stream.text()

    bob.goto(f"{cluster.url}/ui/jobs?user=alice")
    row = bob.locator(f'[data-testid=job-row][data-job="{job_id}"]')
    expect(row).to_contain_text("alices-run")
    expect(row.get_by_test_id("command-hidden")).to_have_text("command hidden")
    assert MARKER not in bob.content()

    # The secret value is on no page, the owner's included.
    pages = [own_page, theirs]
    for who in (alice, bob):
        for path in (f"/ui/jobs/{job_id}", "/ui/jobs", "/ui/queue", "/ui/cluster"):
            who.goto(f"{cluster.url}{path}")
            pages.append(who.content())
    for html in pages:
        assert SECRET not in html


def test_a_refused_form_does_not_send_the_secret_back(cluster: Cluster, visit: Visits) -> None:
    page = visit(cluster.token_for("alice")).page
    page.goto(f"{cluster.url}/ui/submit")
    page.fill("#f-command", "echo never")
    page.fill("#f-gpus", "64")  # no node has 64 GPUs: the form comes back
    page.fill("#f-secret_env", f"TOKEN={SECRET}")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-gpus")).to_contain_text("no node has 64 GPUs")
    expect(page.get_by_test_id("secret-retype")).to_contain_text("Type the secret environment")
    expect(page.locator("#f-secret_env")).to_have_value("")
    expect(page.locator("#f-command")).to_have_value("echo never")
    assert SECRET not in page.content()
