"""The tokens the integration tests' server knows, and `Api`: a TestClient
with those tokens at hand."""

from __future__ import annotations

from fastapi.testclient import TestClient

ADMIN = "admin-token-for-tests"
AGENT = "agent-token-for-tests"


class Api:
    """A TestClient with the tokens at hand."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {ADMIN}"}
        self.agent = {"Authorization": f"Bearer {AGENT}"}

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: object):  # type: ignore[no-untyped-def]
        return self.client.get(path, headers=headers or self.admin, **kw)  # type: ignore[arg-type]

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: object):  # type: ignore[no-untyped-def]
        return self.client.post(path, headers=headers or self.admin, **kw)  # type: ignore[arg-type]

    def put(self, path: str, headers: dict[str, str] | None = None, **kw: object):  # type: ignore[no-untyped-def]
        return self.client.put(path, headers=headers or self.admin, **kw)  # type: ignore[arg-type]

    def user_token(self, user: str) -> dict[str, str]:
        r = self.post("/api/v1/tokens", json={"user": user, "role": "user"})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}
