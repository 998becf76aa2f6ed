"""The Queues page's data: each tenant queue's use, guarantee and fair share now, and
its GPUs in use over a window drawn as an inline SVG chart (no script needed).

Owns nothing; it reads `services.queue_admin` (the list and the samples the
scheduler records when a queue's use changes) and lays the chart out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlmodel import Session

from schedulearn.protocol import QueuePublic
from schedulearn.server.errors import BadRequest
from schedulearn.server.services import queue_admin

WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}
DEFAULT_WINDOW = "24h"
# Chart size in SVG units (it scales to the card's width).
WIDTH, HEIGHT = 800.0, 220.0
COLOURS = ("#4f46e5", "#d97706", "#059669", "#dc2626", "#0891b2", "#7c3aed", "#65a30d", "#db2777")


@dataclass(frozen=True, slots=True)
class Series:
    queue: str
    colour: str
    points: str  # SVG polyline points: the GPUs in use, a step line
    share_points: str  # its fair share at the same moments, a step line
    guarantee_y: float | None  # where its guarantee's dashed line goes
    last: int


@dataclass(frozen=True, slots=True)
class QueuesPage:
    items: list[QueuePublic]
    # The items as a tree: (depth, queue), each parent followed by its children.
    tree: list[tuple[int, QueuePublic]]
    # A parent's name -> the GPUs its children are promised together.
    to_children: dict[str, int]
    # Each queue's line under its row (a parent's speaks of its own jobs).
    summaries: dict[str, str]
    series: list[Series]
    window: str
    start: float  # the chart's left edge (unix time)
    top: int  # GPUs at the chart's top edge
    over: list[QueuePublic]  # queues above their guarantee now
    promised: str = ""  # "queues promise 8 of the cluster's 8 GPUs"
    overcommitted: bool = False


def queues_page(session: Session, now: float, window: str) -> QueuesPage:
    if window not in WINDOWS:
        raise BadRequest(f"window {window!r}: pick one of {', '.join(WINDOWS)}")
    since = now - WINDOWS[window]
    listing = queue_admin.list_queues(session, now)
    items = listing.items
    samples = queue_admin.history(session, since).samples
    by_queue: dict[str, list[tuple[float, int]]] = {}
    shares: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        by_queue.setdefault(s.queue, []).append((s.at, s.used))
        shares.setdefault(s.queue, []).append((s.at, s.share))
    top = max(
        [1, *(q.guaranteed_gpus for q in items), *(q.used for q in items)]
        + [u for points in by_queue.values() for _, u in points]
        + [math.ceil(v) for points in shares.values() for _, v in points]
    )

    # From the first sample in the window (queues are often younger than it),
    # and at least a minute, so that recent changes are not a sliver at the edge.
    start = min(max(since, min((s.at for s in samples), default=since)), now - 60.0)

    def x(t: float) -> float:
        return round(max(0.0, t - start) / (now - start) * WIDTH, 1)

    def y(gpus: float) -> float:
        return round(HEIGHT - gpus / top * HEIGHT, 1)

    def steps(points: list[tuple[float, float]], now_value: float) -> str:
        path: list[str] = []
        previous: float | None = None
        for at, value in points:
            if previous is not None:
                path.append(f"{x(at)},{y(previous)}")
            path.append(f"{x(at)},{y(value)}")
            previous = value
        if not path:
            path.append(f"0,{y(now_value)}")
        path.append(f"{WIDTH},{y(previous if previous is not None else now_value)}")
        return " ".join(path)

    series = []
    names = [q.name for q in items] + sorted(set(by_queue) - {q.name for q in items})
    guarantees = {q.name: q.guaranteed_gpus for q in items}
    for i, name in enumerate(names):
        points = by_queue.get(name, [])
        used_now = next((q.used for q in items if q.name == name), points[-1][1] if points else 0)
        g = guarantees.get(name)
        share_now = next((q.share for q in items if q.name == name), 0.0)
        series.append(
            Series(
                name,
                COLOURS[i % len(COLOURS)],
                steps([(t, float(u)) for t, u in points], float(used_now)),
                steps(shares.get(name, []), share_now),
                y(g) if g else None,
                used_now,
            )
        )
    over = [q for q in items if q.declared and q.used > q.guaranteed_gpus]
    overcommitted = 0 < listing.cluster_gpus < listing.promised
    parents = {q.parent for q in items if q.parent is not None}
    to_children = {name: listing.children_promised(name) for name in parents}
    return QueuesPage(
        items,
        listing.tree(),
        to_children,
        {q.name: listing.summary_of(q) for q in items},
        series,
        window,
        start,
        top,
        over,
        listing.promised_text,
        overcommitted,
    )
