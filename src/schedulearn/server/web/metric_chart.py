"""The job page's charts of the metrics a job reported (loss, accuracy, ... per step).

Owns turning a job's progress history (`services.progress.history`: the
reports of `schedulearn.runtime.report`, oldest first) into small line
charts the template draws as inline SVG: one panel per metric, because
loss and accuracy live on different scales. The geometry is worked out
here, on the server, so the page needs no charting script and the chart
is part of the live fragment that refreshes while the job runs.

The x axis is the step when every report has one, else the epoch, else
the report's number. A resumed job may report a step again; its points
are drawn in x order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from schedulearn.protocol import ProgressPublic

# The drawing area, in SVG user units (the SVG scales to the card's width).
WIDTH = 320.0
HEIGHT = 150.0
LEFT, RIGHT, TOP, BOTTOM = 46.0, 10.0, 10.0, 24.0
MAX_SERIES = 6
# Up to this many points each get a dot with a tooltip; more make a plain line.
DOTS_UP_TO = 60
NAMED = ("loss", "accuracy")


class XAxis(Enum):
    STEP = "step"
    EPOCH = "epoch"
    REPORT = "report"


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    y: float
    px: float  # where it is drawn
    py: float


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # position along its axis, in SVG units
    label: str


@dataclass(frozen=True, slots=True)
class Series:
    """One metric's panel: its points, the line through them, its axes' ticks."""

    name: str
    points: list[Point]
    path: str
    y_ticks: list[Tick]
    x_ticks: list[Tick]

    @property
    def last(self) -> Point:
        return self.points[-1]

    @property
    def dots(self) -> list[Point]:
        return self.points if len(self.points) <= DOTS_UP_TO else [self.points[-1]]


@dataclass(frozen=True, slots=True)
class MetricCharts:
    x_axis: XAxis
    series: list[Series]
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    top: float = TOP
    bottom: float = HEIGHT - BOTTOM


def figure(value: float) -> str:
    """A metric's value as a label: short, and exact enough to tell points apart."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


def tick(value: float) -> str:
    """An axis label: three significant figures are enough beside the exact tooltips."""
    return figure(float(f"{value:.3g}"))


def x_axis_of(reports: list[ProgressPublic]) -> XAxis:
    if all(r.step is not None for r in reports):
        return XAxis.STEP
    if all(r.epoch is not None for r in reports):
        return XAxis.EPOCH
    return XAxis.REPORT


def _x(report: ProgressPublic, number: int, axis: XAxis) -> float:
    if axis is XAxis.STEP and report.step is not None:
        return float(report.step)
    if axis is XAxis.EPOCH and report.epoch is not None:
        return float(report.epoch)
    return float(number)


def _values(reports: list[ProgressPublic], name: str, axis: XAxis) -> list[tuple[float, float]]:
    values = []
    for number, report in enumerate(reports, start=1):
        value = getattr(report, name) if name in NAMED else report.metrics.get(name)
        if value is not None and value == value:  # NaN has no place on a chart
            values.append((_x(report, number, axis), float(value)))
    values.sort(key=lambda xy: xy[0])
    return values


def _span(low: float, high: float) -> tuple[float, float]:
    """The axis range: the data's, a little wider so no point sits on the frame."""
    if low == high:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


def _series(name: str, values: list[tuple[float, float]]) -> Series:
    xs = [x for x, _ in values]
    ys = [y for _, y in values]
    x0, x1 = (min(xs), max(xs)) if min(xs) != max(xs) else (min(xs) - 1, max(xs) + 1)
    y0, y1 = _span(min(ys), max(ys))
    inner_w = WIDTH - LEFT - RIGHT
    inner_h = HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return round(LEFT + (x - x0) / (x1 - x0) * inner_w, 2)

    def py(y: float) -> float:
        return round(TOP + (y1 - y) / (y1 - y0) * inner_h, 2)

    points = [Point(x, y, px(x), py(y)) for x, y in values]
    path = "M" + " L".join(f"{p.px},{p.py}" for p in points)
    low, high = min(ys), max(ys)
    y_ticks = [Tick(py(v), tick(v)) for v in dict.fromkeys((high, (low + high) / 2, low))]
    x_ticks = [Tick(px(v), figure(v)) for v in dict.fromkeys((min(xs), max(xs)))]
    return Series(name, points, path, y_ticks, x_ticks)


def charts(reports: list[ProgressPublic]) -> MetricCharts | None:
    """The panels for the metrics the job reported; None when it reported none."""
    if not reports:
        return None
    axis = x_axis_of(reports)
    extra = sorted({k for r in reports for k in r.metrics} - set(NAMED))
    series = []
    for name in (*NAMED, *extra):
        values = _values(reports, name, axis)
        if values:
            series.append(_series(name, values))
        if len(series) == MAX_SERIES:
            break
    return MetricCharts(axis, series) if series else None
