"""Executors: how a job's process runs on the host (process group, or container)."""
