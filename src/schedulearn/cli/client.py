"""A typed HTTP client for the user API, shared by the CLI commands and the tests.

Each method returns a `schedulearn.protocol` model. Every call carries the
protocol version (`PROTOCOL_HEADER`); a server that does not speak it
answers 400 with both versions named. Errors become `ApiError` with the
server's own message (which says what to change).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from schedulearn.protocol import (
    API_PREFIX,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    JobHistory,
    JobList,
    JobPublic,
    JobSpec,
    JoinTokenPublic,
    LogLinePublic,
    LogPage,
    NodeAdd,
    NodeList,
    NodeRemoved,
    PolicyPreview,
    PolicyPublic,
    ProfileImport,
    ProfileImportReply,
    ProfileList,
    SubmitReply,
    TokenCreate,
    TokenInfo,
    TokenList,
    TokenPublic,
    UserCreate,
    UserList,
    UserPublic,
    UserUpdate,
    WhoAmI,
)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Client:
    def __init__(
        self,
        server: str,
        token: str | None,
        timeout: float = 30.0,
        protocol: int = PROTOCOL_VERSION,
    ) -> None:
        # `protocol` is this release's version; tests pass another to play a client
        # of another release.
        headers = {PROTOCOL_HEADER: str(protocol)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server = server
        self._http = httpx.Client(base_url=server, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, API_PREFIX + path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(
                0,
                f"cannot reach the server at {self.server} ({exc}); start it with "
                "`schedulearn up`, or pass --server / set SCHEDULEARN_SERVER",
            ) from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response))
        return response

    def submit(self, spec: JobSpec) -> SubmitReply:
        body = spec.model_dump(mode="json", exclude_defaults=True)
        return SubmitReply.model_validate(self._call("POST", "/jobs", json=body).json())

    def submit_yaml(self, text: str) -> SubmitReply:
        response = self._call(
            "POST", "/jobs", content=text.encode(), headers={"content-type": "application/yaml"}
        )
        return SubmitReply.model_validate(response.json())

    def jobs(
        self,
        states: list[str] | None = None,
        user: str | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int = 100,
        order: str = "desc",
    ) -> JobList:
        params: dict[str, Any] = {"offset": offset, "limit": limit, "order": order}
        if states:
            params["state"] = states
        if user:
            params["user"] = user
        if name:
            params["name"] = name
        return JobList.model_validate(self._call("GET", "/jobs", params=params).json())

    def job(self, job_id: int) -> JobPublic:
        return JobPublic.model_validate(self._call("GET", f"/jobs/{job_id}").json())

    def history(self, job_id: int) -> JobHistory:
        return JobHistory.model_validate(self._call("GET", f"/jobs/{job_id}/history").json())

    def cancel(self, job_id: int) -> JobPublic:
        return JobPublic.model_validate(self._call("POST", f"/jobs/{job_id}/cancel").json())

    def logs(self, job_id: int, after: int = 0, limit: int = 1000) -> LogPage:
        params = {"after": after, "limit": limit}
        return LogPage.model_validate(
            self._call("GET", f"/jobs/{job_id}/logs", params=params).json()
        )

    def follow(self, job_id: int, after: int = 0) -> Iterator[LogLinePublic | JobPublic]:
        """Lines as they come (server-sent events), then the job as it ended."""
        params = {"after": after, "follow": "true"}
        try:
            with self._http.stream(
                "GET", f"{API_PREFIX}/jobs/{job_id}/logs", params=params, timeout=None
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(response.status_code, _message(response))
                event = ""
                for raw in response.iter_lines():
                    if raw.startswith("event:"):
                        event = raw[6:].strip()
                    elif raw.startswith("data:"):
                        data = raw[5:].strip()
                        if event == "end":
                            yield JobPublic.model_validate_json(data)
                            return
                        yield LogLinePublic.model_validate_json(data)
        except httpx.TransportError as exc:
            raise ApiError(0, f"lost the connection to {self.server} ({exc})") from None

    def nodes(self) -> NodeList:
        return NodeList.model_validate(self._call("GET", "/nodes").json())

    def policy(self) -> PolicyPublic:
        return PolicyPublic.model_validate(self._call("GET", "/policy").json())

    def set_policy(self, spec: str) -> PolicyPublic:
        return PolicyPublic.model_validate(self._call("PUT", "/policy", json={"spec": spec}).json())

    def policy_preview(self, policies: str | None = None) -> PolicyPreview:
        params = {"policies": policies} if policies else {}
        response = self._call("GET", "/policy/preview", params=params)
        return PolicyPreview.model_validate(response.json())

    def profiles(self) -> ProfileList:
        return ProfileList.model_validate(self._call("GET", "/profiles").json())

    def import_profiles(self, body: ProfileImport) -> ProfileImportReply:
        response = self._call("POST", "/profiles", json=body.model_dump(mode="json"))
        return ProfileImportReply.model_validate(response.json())

    def create_token(
        self,
        user: str | None = None,
        role: str = "user",
        name: str = "",
        expires: str | None = None,
    ) -> TokenPublic:
        body = TokenCreate(user=user, role=role, name=name, expires=expires)  # type: ignore[arg-type]
        response = self._call("POST", "/tokens", json=body.model_dump(exclude_defaults=True))
        return TokenPublic.model_validate(response.json())

    def tokens(self, user: str | None = None, include_ended: bool = False) -> TokenList:
        params: dict[str, Any] = {"all": include_ended}
        if user:
            params["user"] = user
        return TokenList.model_validate(self._call("GET", "/tokens", params=params).json())

    def revoke_token(self, token_id: int) -> TokenInfo:
        return TokenInfo.model_validate(self._call("DELETE", f"/tokens/{token_id}").json())

    def users(self) -> UserList:
        return UserList.model_validate(self._call("GET", "/users").json())

    def add_user(self, body: UserCreate) -> UserPublic:
        response = self._call("POST", "/users", json=body.model_dump(exclude_defaults=True))
        return UserPublic.model_validate(response.json())

    def update_user(self, name: str, body: UserUpdate) -> UserPublic:
        response = self._call(
            "PATCH", f"/users/{name}", json=body.model_dump(exclude_defaults=True)
        )
        return UserPublic.model_validate(response.json())

    def add_node(self, name: str, expires_seconds: float) -> JoinTokenPublic:
        body = NodeAdd(name=name, expires_seconds=expires_seconds).model_dump(mode="json")
        return JoinTokenPublic.model_validate(self._call("POST", "/nodes", json=body).json())

    def remove_node(self, name: str) -> NodeRemoved:
        path = f"/nodes/{quote(name, safe='')}"
        return NodeRemoved.model_validate(self._call("DELETE", path).json())

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self._call("GET", "/whoami").json())


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, ValueError):
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return f"HTTP {response.status_code}: {body}"
