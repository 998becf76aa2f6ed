"""schemathesis against the OpenAPI schema of a real server process:
no 5xx and no response that breaks the schema, for generated requests to
every operation (with an admin token, so requests get past auth)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pg_server import Postgres
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from server_api import ADMIN, AGENT

from schedulearn.cli.localcluster import ServerProcess


class _Http:
    """Just enough of the test API wrapper for WireAgent, over a real socket."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.agent = {"Authorization": f"Bearer {AGENT}"}

    def post(self, path: str, headers: dict[str, str], json: object) -> httpx.Response:
        return self.http.post(path, headers=headers, json=json)

    def node(self, name: str) -> dict[str, str]:
        """The old-style agent token: bound to the one node this test registers."""
        return self.agent


@pytest.fixture
def live_schema_server(
    tmp_path_factory: pytest.TempPathFactory, postgres: Postgres | None
) -> Iterator[str]:
    # Function scope (the module's one test): it runs on each backend in turn.
    root: Path = tmp_path_factory.mktemp("schema")
    url = postgres.new_database() if postgres is not None else f"sqlite:///{root / 'db.sqlite'}"
    server = ServerProcess(
        url, root / "server.log", ADMIN, AGENT, env={"SCHEDULEARN_MAX_WAIT_SECONDS": "0.2"}
    )
    server.start()
    try:
        server.wait_ready()
        from wire_agent import WireAgent

        # A node, so job submissions are judged against real capacity.
        WireAgent(_Http(server.url), "n1", gpus=4).register()
        yield server.url
    finally:
        server.kill()
        print(server.log()[-5000:])


def test_api_matches_its_schema(live_schema_server: str) -> None:
    schema = schemathesis.openapi.from_url(f"{live_schema_server}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert len(operations) >= 15
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Case[Any]) -> None:
            if case.query and str(case.query.get("follow", "")).lower() in TRUE:
                # A followed log of a job that never ends streams forever; the
                # stream is covered by the lifecycle and end-to-end tests.
                case.query["follow"] = "false"
            case.call_and_validate(
                headers={"Authorization": f"Bearer {ADMIN}"},
                timeout=30,
                checks=[
                    not_a_server_error,
                    status_code_conformance,
                    content_type_conformance,
                    response_schema_conformance,
                ],
            )

        check()


TRUE = ("true", "1", "yes", "on")
