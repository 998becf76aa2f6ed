"""The live server: FastAPI app, database, and the scheduler loop (DESIGN.md section 3).

`create_app(settings)` builds an app; `schedulearn server` runs it on uvicorn.
"""

from schedulearn.server.app import create_app

__all__ = ["create_app"]
