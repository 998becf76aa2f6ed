"""The live server: FastAPI app, database, and the scheduler loop (DESIGN.md section 3).

`create_app(settings)` builds an app; `schedulearn server` runs it on uvicorn.
`create_app` is imported on first use, so `server.startup` (what a server
process listens with before the app is loaded) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schedulearn.server.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from schedulearn.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
