"""The figures bench/scale.py prints: how they are read and summed up.

Owns the reading of the server's `/metrics` (the scheduling pass
histogram, nodes by health), the database's size on disk, PostgreSQL's
CPU, percentiles, and `Figures`: one N's results, printed as lines and
as JSON, and the curve over N.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from machine import _cpu_seconds
from rawhttp import Connection

from schedulearn.cli.localpostgres import LocalPostgres

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) ([-+0-9.eEinfNa]+)$")
PASS = "schedulearn_scheduler_pass_seconds"


async def scrape(url: str) -> dict[str, float]:
    """Every sample of the server's /metrics, by name with its labels."""
    conn = Connection(url, "")
    try:
        _, body = await conn.send(conn.request_bytes("GET", "/metrics"))
    finally:
        conn.close()
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def histogram_quantile(before: dict[str, float], after: dict[str, float], q: float) -> float:
    """The `q` quantile of the pass histogram between two scrapes (linear inside a bucket)."""
    bounds = []
    for key in after:
        if key.startswith(PASS + "_bucket"):
            le = key.split('le="')[1].rstrip('"}')
            bounds.append((float(le), after[key] - before.get(key, 0.0)))
    bounds.sort()
    total = bounds[-1][1] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for le, count in bounds:
        if count >= rank:
            if le == float("inf"):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def db_size(url: str) -> int:
    """Bytes the database holds on disk (SQLite: the file and its WAL)."""
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def troubles(url: str, log: Path) -> dict[str, int]:
    """What went wrong over the whole run: runs lost (jobs moved to `lost`: a node
    marked down, or a run a heartbeat no longer listed), passes the ledger
    refused, and requests that failed in the server (500s), from its log."""
    query = "SELECT count(*) FROM job_transition WHERE to_state = 'lost'"
    if url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(url.split("///", 1)[1])) as db:
            lost = int(db.execute(query).fetchone()[0])
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(query).fetchone()
            lost = int(row[0]) if row else 0
    text = log.read_text(errors="replace") if log.exists() else ""
    return {
        "lost_runs": lost,
        "ledger_refusals": text.count("refused by the ledger"),
        "server_errors": text.count("unhandled error"),
    }


def postgres_cpu(pg: LocalPostgres) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster, its live backends,
    and those it reaped."""
    pid = int((pg.data / "postmaster.pid").read_text().split()[0])
    total = _cpu_seconds(pid) + _cpu_seconds(pid, reaped=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    total += _cpu_seconds(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return total


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _within(pairs: list[list[float]], window: tuple[float, float]) -> list[float]:
    return [s for t, s in pairs if window[0] <= t <= window[1]]


@dataclass
class Figures:
    database: str
    hosts: int
    gpus: int
    window_s: float
    server_cpu_share: float  # of one core
    postgres_cpu_share: float | None
    submit_p50_ms: float
    submit_p99_ms: float
    list_p50_ms: float
    list_p99_ms: float
    heartbeat_p50_ms: float
    heartbeat_p99_ms: float
    heartbeats: int
    pass_p50_ms: float
    pass_p99_ms: float
    passes: int
    free_to_start_p50_s: float
    free_to_start_p99_s: float
    free_to_start_n: int
    finished_in_window: int
    db_growth_bytes: int
    db_bytes: int
    nodes_down: int
    reregistered: int
    stopped: dict[str, int]
    agent_loop_lag_p99_ms: float
    agent_errors: list[str]
    jobs_ended: int
    jobs_succeeded: int
    jobs_total: int
    pending_at_end: int  # jobs still queued when the window closed (0: GPUs idled for want of work)
    load: tuple[float, float, float]
    # Over the whole run (`troubles`).
    lost_runs: int = 0
    ledger_refusals: int = 0
    server_errors: int = 0

    @classmethod
    def of(
        cls,
        database: str,
        hosts: int,
        args: argparse.Namespace,
        window: tuple[float, float],
        elapsed: float,
        cpu: float,
        pg_share: float | None,
        submits: list[float],
        lists: list[float],
        scrapes: tuple[dict[str, float], dict[str, float]],
        sizes: tuple[int, int],
        finished: int,
        samples: list[dict[str, Any]],
        down: float,
        load: tuple[float, float, float],
        jobs: tuple[int, int, int],
    ) -> Figures:
        ended, succeeded, total = jobs
        beats = [s for w in samples for s in _within(w["heartbeat"], window)]
        free = [s for w in samples for s in _within(w["free_to_start"], window)]
        lag = [s for w in samples for s in _within(w["loop_lag"], window)]
        stopped: dict[str, int] = {}
        for w in samples:
            for reason, n in w["stopped"].items():
                stopped[reason] = stopped.get(reason, 0) + n
        before, after = scrapes
        return cls(
            database=database,
            hosts=hosts,
            gpus=args.gpus,
            window_s=elapsed,
            server_cpu_share=cpu / elapsed,
            postgres_cpu_share=pg_share,
            submit_p50_ms=pct(submits, 0.5) * 1000,
            submit_p99_ms=pct(submits, 0.99) * 1000,
            list_p50_ms=pct(lists, 0.5) * 1000,
            list_p99_ms=pct(lists, 0.99) * 1000,
            heartbeat_p50_ms=pct(beats, 0.5) * 1000,
            heartbeat_p99_ms=pct(beats, 0.99) * 1000,
            heartbeats=len(beats),
            pass_p50_ms=histogram_quantile(before, after, 0.5) * 1000,
            pass_p99_ms=histogram_quantile(before, after, 0.99) * 1000,
            passes=int(after.get(PASS + "_count", 0) - before.get(PASS + "_count", 0)),
            free_to_start_p50_s=pct(free, 0.5),
            free_to_start_p99_s=pct(free, 0.99),
            free_to_start_n=len(free),
            finished_in_window=finished,
            db_growth_bytes=sizes[1] - sizes[0],
            db_bytes=sizes[1],
            nodes_down=int(down),
            reregistered=sum(w["reregistered"] for w in samples),
            stopped=stopped,
            agent_loop_lag_p99_ms=pct(lag, 0.99) * 1000,
            agent_errors=[e for w in samples for e in w["errors"]][:20],
            jobs_ended=ended,
            jobs_succeeded=succeeded,
            jobs_total=total,
            pending_at_end=int(after.get('schedulearn_jobs{state="pending"}', 0)),
            load=load,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        pg_share = self.postgres_cpu_share
        pg = "" if pg_share is None else f", PostgreSQL {pg_share:.2f}"
        lines = [
            f"window {self.window_s:.0f}s, load average {', '.join(f'{x:.2f}' for x in self.load)}",
            f"server CPU share {self.server_cpu_share:.2f} of a core{pg}",
            f"submission p50 {self.submit_p50_ms:.1f} ms, p99 {self.submit_p99_ms:.1f} ms; "
            f"listing p50 {self.list_p50_ms:.1f} ms, p99 {self.list_p99_ms:.1f} ms",
            f"heartbeat round trip p50 {self.heartbeat_p50_ms:.1f} ms, p99 "
            f"{self.heartbeat_p99_ms:.1f} ms ({self.heartbeats} heartbeats; agents' event "
            f"loop lag p99 {self.agent_loop_lag_p99_ms:.1f} ms)",
            f"scheduling pass p50 {self.pass_p50_ms:.1f} ms, p99 {self.pass_p99_ms:.1f} ms "
            f"({self.passes} passes)",
            f"GPU free -> next start p50 {self.free_to_start_p50_s:.3f} s, p99 "
            f"{self.free_to_start_p99_s:.3f} s ({self.free_to_start_n} GPUs; "
            f"{self.pending_at_end} jobs still queued at the window's end)",
            f"{self.finished_in_window} jobs finished in the window; database "
            f"+{self.db_growth_bytes / 1e6:.2f} MB (now {self.db_bytes / 1e6:.1f} MB)",
            f"nodes marked down {self.nodes_down}, registered again {self.reregistered}, "
            f"stop orders {self.stopped or 'none'}; jobs ended {self.jobs_ended} of "
            f"{self.jobs_total} ({self.jobs_succeeded} succeeded)",
        ]
        lines.append(
            f"over the run: runs lost {self.lost_runs}, passes refused by the ledger "
            f"{self.ledger_refusals}, requests failed in the server {self.server_errors}"
        )
        if self.agent_errors:
            lines.append(f"agent errors (first {len(self.agent_errors)}): {self.agent_errors}")
        return "\n".join("  " + line for line in lines)

    @staticmethod
    def curve(results: list[dict[str, Any]]) -> str:
        """One row per run: the figures the goals name."""
        head = (
            "db          N  cpu   sub p99  list p99  hb p99  pass p50/p99  free->start p99  "
            "MB/min  down"
        )
        rows = [head]
        for r in results:
            mb_min = r["db_growth_bytes"] / 1e6 / r["window_s"] * 60
            rows.append(
                f"{r['database']:<10} {r['hosts']:>4}  {r['server_cpu_share']:.2f}  "
                f"{r['submit_p99_ms']:7.1f}  {r['list_p99_ms']:8.1f}  "
                f"{r['heartbeat_p99_ms']:6.1f}  "
                f"{r['pass_p50_ms']:5.1f}/{r['pass_p99_ms']:<6.1f}  "
                f"{r['free_to_start_p99_s']:15.3f}  {mb_min:6.2f}  {r['nodes_down']:4d}"
            )
        return "\n".join(rows)
