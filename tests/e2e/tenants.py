"""A tenant of an e2e cluster: a real unix account and the server user of the same
name, with a token of its own (used by the tenancy and containment tests)."""

from __future__ import annotations

import pwd
from pathlib import Path

import httpx
from e2e_cluster import ADMIN, Cluster


class Tenant:
    """A unix account and the server user of the same name, with a token of its own."""

    def __init__(self, name: str, cluster: Cluster) -> None:
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid
        self.home = Path(entry.pw_dir)
        made = httpx.post(
            f"{cluster.server.url}/api/v1/tokens",
            json={"user": name, "role": "user"},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        assert made.status_code == 201, made.text
        self.token: str = made.json()["token"]
        self.http = httpx.Client(
            base_url=f"{cluster.server.url}/api/v1",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
        )

    def submit(self, **spec: object) -> int:
        """Submit a 1-GPU job (unless `spec` says otherwise); its id."""
        r = self.http.post("/jobs", json={"gpus": 1, **spec})
        assert r.status_code in (200, 201), r.text
        return int(r.json()["ids"][0])
