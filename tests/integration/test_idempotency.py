"""Idempotent submission (issue 14, item 7): a repeated `Idempotency-Key` returns
the jobs of the first request and makes no new ones; the same key with
another spec is refused; arrays and YAML bodies count too."""

from __future__ import annotations

from httpx import Response
from server_api import Api

from schedulearn.protocol import JobSpec
from schedulearn.server.auth import Caller, Role
from schedulearn.server.db import Database, head_revision
from schedulearn.server.services import idempotency
from schedulearn.server.services.idempotency import TTL_SECONDS, Submission
from schedulearn.server.services.jobs import Submitted
from schedulearn.settings import ServerSettings


def register(api: Api) -> None:
    reply = api.post(
        "/api/v1/agent/register", headers=api.agent, json={"name": "n1", "gpus": [{"index": 0}]}
    )
    assert reply.status_code == 200, reply.text


def total(api: Api) -> int:
    return int(api.get("/api/v1/jobs").json()["total"])


def submit(api: Api, body: dict[str, object], key: str | None) -> Response:
    headers = {**api.admin, **({"Idempotency-Key": key} if key else {})}
    return api.post("/api/v1/jobs", headers=headers, json=body)


def test_repeating_a_keyed_submission_returns_the_same_jobs_and_makes_one(api: Api) -> None:
    register(api)
    first = submit(api, {"command": ["true"], "name": "once"}, "k-1")
    again = submit(api, {"command": ["true"], "name": "once"}, "k-1")
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert first.json()["ids"] == again.json()["ids"]
    assert total(api) == 1


def test_an_array_is_returned_whole_and_yaml_matches_json(api: Api) -> None:
    register(api)
    first = submit(api, {"command": ["true"], "count": 3}, "arr")
    yaml_again = api.post(
        "/api/v1/jobs",
        headers={**api.admin, "Idempotency-Key": "arr", "content-type": "application/yaml"},
        content=b"command: ['true']\ncount: 3\n",
    )
    assert yaml_again.status_code == 201, yaml_again.text
    assert len(first.json()["ids"]) == 3
    assert yaml_again.json()["ids"] == first.json()["ids"]
    assert total(api) == 3


def test_the_same_key_with_another_spec_is_refused_saying_why(api: Api) -> None:
    register(api)
    assert submit(api, {"command": ["true"]}, "k-2").status_code == 201
    other = submit(api, {"command": ["false"]}, "k-2")
    assert other.status_code == 409, other.text
    assert "already used for a different job spec" in other.json()["error"]
    assert total(api) == 1


def test_without_a_key_or_with_new_keys_each_request_makes_jobs(api: Api) -> None:
    register(api)
    for key in (None, None, "a", "b"):
        assert submit(api, {"command": ["true"]}, key).status_code == 201
    assert total(api) == 4


def test_keys_belong_to_their_user(api: Api) -> None:
    register(api)
    token = api.post("/api/v1/tokens", json={"user": "bob", "role": "user"}).json()["token"]
    bob = {"Authorization": f"Bearer {token}", "Idempotency-Key": "shared"}
    mine = submit(api, {"command": ["true"]}, "shared")
    his = api.post("/api/v1/jobs", headers=bob, json={"command": ["true"]})
    assert his.status_code == 201, his.text
    assert his.json()["ids"] != mine.json()["ids"]
    assert total(api) == 2


def test_keys_expire_after_a_day(api: Api, settings: ServerSettings) -> None:
    register(api)
    database = Database(settings.database_url)
    try:
        keyed = [Submission(JobSpec(command=["true"]), Caller("ann", Role.USER), "old")]

        def ids(now: float) -> list[int | None]:
            [result] = database.call(idempotency.submit, keyed, now)
            assert isinstance(result, Submitted), result
            return [job.id for job in result.jobs]

        first = ids(1000.0)
        assert ids(1000.0 + TTL_SECONDS - 1) == first
        assert ids(1000.0 + TTL_SECONDS + 1) != first  # expired: a new submission
    finally:
        database.close()


def test_head_revision_read_from_the_files_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from schedulearn.server.db import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert [head_revision()] == ScriptDirectory.from_config(config).get_heads()
