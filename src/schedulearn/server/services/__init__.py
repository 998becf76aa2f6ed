"""Service functions: everything the API does to the database.

Each function takes a `Session` first (it runs on the database threads,
see `server.db.Database.run`), does one job, commits, and returns typed
results plus the `Changes` that tell `server.wakeups` whom to wake.
Routers call exactly one of these per request.
"""
