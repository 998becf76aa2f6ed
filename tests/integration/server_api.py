"""The tokens the integration tests' server knows, and `Api`: a TestClient
with those tokens at hand."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx import Response

from schedulearn.server.state import AppState
from waiting import wait_until

ADMIN = "admin-token-for-tests"
AGENT = "agent-token-for-tests"

T = TypeVar("T")


def app_state(client: TestClient) -> AppState:
    """The state (`server.state.AppState`) of the app a TestClient drives."""
    app = client.app
    assert isinstance(app, FastAPI), app
    state: AppState = app.state.sl
    return state


@overload
def on_app_loop(client: TestClient, call: Callable[[], Awaitable[T]]) -> T: ...
@overload
def on_app_loop(client: TestClient, call: Callable[[], T]) -> T: ...
def on_app_loop(client: TestClient, call: Callable[[], Any]) -> Any:
    """`call()` on the app's event loop (the TestClient must be entered)."""
    assert client.portal is not None, "the TestClient is not entered (`with TestClient(...)`)"
    return client.portal.call(call)


class Api:
    """A TestClient with the tokens at hand."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {ADMIN}"}
        # The old-style agent token: bound to the first node it registers.
        self.agent = {"Authorization": f"Bearer {AGENT}"}
        self._nodes: dict[str, dict[str, str]] = {}

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Response:
        response: Response = self.client.get(path, headers=headers or self.admin, **kw)
        return response

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Response:
        response: Response = self.client.post(path, headers=headers or self.admin, **kw)
        return response

    def put(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Response:
        response: Response = self.client.put(path, headers=headers or self.admin, **kw)
        return response

    @property
    def state(self) -> AppState:
        """The app's state (`server.state.AppState`)."""
        return app_state(self.client)

    def call_asgi(
        self, asgi: Any, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        """Send one request straight to `asgi` (a middleware under test, with
        this app in its scope) on the app's event loop; its status and body."""
        target, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": target,
            "raw_path": target.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "app": self.client.app,
        }
        sent: list[dict[str, Any]] = []

        async def run() -> None:
            messages = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive() -> dict[str, Any]:
                return messages.pop() if messages else {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            await asgi(scope, receive, send)

        on_app_loop(self.client, run)
        return int(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])

    def settle(self) -> None:
        """Return once a whole scheduling round has run that began after this call.

        What a test asserts afterwards ("still pending") is then what the
        scheduler decided about the state the test made, not a moment before
        the scheduler looked. Two completed rounds: the first may have begun
        before the call, the second began after the first ended.
        """
        scheduler = self.state.scheduler
        seen = scheduler.passes
        on_app_loop(self.client, scheduler.wakeups.wake_scheduler)
        wait_until(
            lambda: scheduler.passes,
            10,
            "a scheduling round begun after the test's last change",
            until=lambda passes: passes >= seen + 2,
        )

    def user_token(self, user: str) -> dict[str, str]:
        r = self.post("/api/v1/tokens", json={"user": user, "role": "user"})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def enroll(self, node: str) -> str:
        """A fresh credential for `node`, as `node add` and an agent's join make one."""
        r = self.post("/api/v1/nodes", json={"name": node})
        assert r.status_code == 201, r.text
        joined = self.client.post("/api/v1/agent/join", json={"join_token": r.json()["join_token"]})
        assert joined.status_code == 200, joined.text
        assert joined.json()["node"] == node
        return str(joined.json()["credential"])

    def node(self, name: str) -> dict[str, str]:
        """Agent headers for node `name` (enrolled on first use)."""
        if name not in self._nodes:
            self._nodes[name] = {"Authorization": f"Bearer {self.enroll(name)}"}
        return self._nodes[name]
