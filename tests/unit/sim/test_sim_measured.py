"""The measured speed model against the Pollux application tables in ../shared/traces."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from schedulearn.core.views import Placement
from schedulearn.sim import SimJob, parse_cluster
from schedulearn.sim.measured import AppTables, EpochCurve, MeasuredSpeed, canonical
from schedulearn.sim.speed import ClusterShape


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def apps(traces: Path) -> Path:
    return traces / "pollux" / "apps"


def test_step_time_on_a_measured_placement_is_the_table_value(apps: Path) -> None:
    bert = AppTables(apps / "bert")
    for row in rows(apps / "bert" / "placements.csv")[:40]:
        counts = tuple(int(c) for c in row["placement"])
        step, sync = bert.throughput(counts, float(row["local_bsz"]))
        # Rows that repeat a (placement, batch) pair are averaged; these are unique.
        assert step == pytest.approx(float(row["step_time"]))
        assert sync == pytest.approx(float(row["sync_time"]))


def test_step_time_between_measured_batches_is_linear(apps: Path) -> None:
    cifar = AppTables(apps / "cifar10")
    table = [r for r in rows(apps / "cifar10" / "placements.csv") if r["placement"] == "4"]
    a, b = table[2], table[3]
    mid = (float(a["local_bsz"]) + float(b["local_bsz"])) / 2
    step, _ = cifar.throughput((4,), mid)
    assert step == pytest.approx((float(a["step_time"]) + float(b["step_time"])) / 2)


def test_placements_are_keyed_by_their_smallest_rotation() -> None:
    assert canonical((2, 1, 1)) == (1, 1, 2)
    assert canonical((3, 2, 1)) == (1, 3, 2)
    assert canonical((4, 0, 4)) == (4, 4)


def test_placements_beyond_the_table_interpolate_between_node_counts(apps: Path) -> None:
    cifar = AppTables(apps / "cifar10")
    four, _ = cifar.throughput((4, 4, 4, 4), 256)
    five, _ = cifar.throughput((4, 4, 4, 2, 2), 256)
    six = cifar._at_nodes(6, 16, 256)[0]
    assert min(four, six) <= five <= max(four, six) + 1e-12
    assert five > 0


def test_epoch_ends_are_the_smallest_progress_over_the_validation_tables(apps: Path) -> None:
    cifar = AppTables(apps / "cifar10")
    assert len(cifar.epoch_ends) == 100
    tables = [rows(p) for p in sorted((apps / "cifar10").glob("validation-*.csv"))]
    for epoch in (0, 49, 99):
        assert cifar.epoch_ends[epoch] == min(float(t[epoch]["progress"]) for t in tables)


def test_gain_is_one_at_the_smallest_batch(apps: Path) -> None:
    cifar = AppTables(apps / "cifar10")
    assert cifar.init_batch == 128
    rates = cifar.epoch_rates((1,), 128)
    step, _ = cifar.throughput((1,), 128)
    assert rates[0] == pytest.approx(1.0 / step)
    # A bigger batch makes more progress per step (gain > 1), less than linearly.
    big = cifar.epoch_rates((4,), 2048)
    step4, _ = cifar.throughput((4,), 512)
    assert 1.0 / step4 < big[10] < 16.0 / step4


def test_batch_split_follows_pollux(apps: Path) -> None:
    ncf = AppTables(apps / "ncf")
    # A single GPU above the smallest batch accumulates at least once.
    assert ncf.batch_split(32768, 1) == (16384, 1)
    yolo = AppTables(apps / "yolov3")
    assert yolo.max_local == 8
    assert yolo.batch_split(64, 4) == (8, 1)


def test_curve_inverts(apps: Path) -> None:
    cifar = AppTables(apps / "cifar10")
    curve = EpochCurve(cifar.epoch_ends, cifar.epoch_rates((4, 2), 2048))
    total = cifar.total_work
    seconds = curve.seconds_to(0.0, total)
    assert curve.advance(0.0, seconds) == pytest.approx(total)
    half = curve.advance(0.0, seconds / 2)
    assert curve.seconds_to(half, total) == pytest.approx(seconds / 2)


def test_whole_second_epochs_round_each_epoch_as_pollux_does() -> None:
    # Two epochs of 10 units at 3 units/s: 3.33 s each exactly, 3 s each rounded.
    exact = EpochCurve((10.0, 20.0), (3.0, 3.0))
    whole = EpochCurve((10.0, 20.0), (3.0, 3.0), whole_seconds=True)
    assert exact.seconds_to(0.0, 20.0) == pytest.approx(20 / 3)
    assert whole.seconds_to(0.0, 10.0) == 3.0
    assert whole.seconds_to(0.0, 20.0) == 6.0
    # The epoch's end comes at the whole second; before it progress grows at the rate.
    assert whole.advance(0.0, 3.0) == 10.0
    assert whole.advance(0.0, 2.0) == pytest.approx(6.0)
    assert whole.advance(0.0, 4.0) == pytest.approx(13.0)
    # Stopped mid-epoch, the rest of the epoch is rounded again: 4 units left = 1.33 s -> 1 s.
    assert whole.seconds_to(6.0, 10.0) == 1.0
    # Rounded up (2.6 s -> 3 s): progress waits at the epoch's end, never past it.
    up = EpochCurve((10.0,), (10.0 / 2.6,), whole_seconds=True)
    assert up.seconds_to(0.0, 10.0) == 3.0
    assert up.advance(0.0, 2.8) == 10.0


def test_whole_second_epochs_are_the_same_when_a_run_is_cut_at_whole_seconds(
    apps: Path,
) -> None:
    # Pollux's simulator cuts a running job at every 60 s round; cutting at a
    # whole second must not move any epoch end.
    cifar = AppTables(apps / "cifar10")
    curve = EpochCurve(cifar.epoch_ends, cifar.epoch_rates((4, 2), 2048), whole_seconds=True)
    total = curve.seconds_to(0.0, cifar.total_work)
    assert total == int(total)
    exact = EpochCurve(cifar.epoch_ends, cifar.epoch_rates((4, 2), 2048))
    assert abs(total - exact.seconds_to(0.0, cifar.total_work)) <= 0.5 * cifar.epochs
    assert total != pytest.approx(exact.seconds_to(0.0, cifar.total_work), abs=1.0)
    for cut in (60.0, 137.0, 420.0):
        done = curve.advance(0.0, cut)
        assert cut + curve.seconds_to(done, cifar.total_work) == total
    for e in (0, 10, 99):
        end = curve.seconds_to(0.0, cifar.epoch_ends[e])
        assert end == int(end) and curve.advance(0.0, end) == cifar.epoch_ends[e]


def test_artifact_time_ranks_gpus_from_the_node_holding_the_most(apps: Path) -> None:
    # Pollux's Tiresias takes GPUs from the most free node first, so its
    # placement on nodes holding 2, 4, 2, 4 GPUs reads (4, 4, 2, 2); the
    # tables key step times by that order ("2244", not "2424").
    shape = ClusterShape.of(parse_cluster("16x4").nodes)
    job = SimJob(0, 0.0, 12, app="bert", batch_size=384)
    placement = Placement.of({"n01": [0, 1], "n02": range(4), "n07": [0, 1], "n12": range(4)})
    bert = AppTables(apps / "bert")
    artifact = MeasuredSpeed(apps, artifact_time=True).curve(job, placement, shape)
    ours = MeasuredSpeed(apps).curve(job, placement, shape)
    assert isinstance(artifact, EpochCurve) and isinstance(ours, EpochCurve)
    assert artifact.rates == bert.epoch_rates((2, 2, 4, 4), 384)
    assert ours.rates == bert.epoch_rates((2, 4, 2, 4), 384)
    assert artifact.rates != ours.rates
    assert artifact.whole_seconds and not ours.whole_seconds


def test_measured_jobs_run_faster_on_one_node_and_with_more_gpus(apps: Path) -> None:
    speed = MeasuredSpeed(apps)
    shape = ClusterShape.of(parse_cluster("16x4").nodes)
    job = SimJob(0, 0.0, 4, app="bert", batch_size=384)
    packed = speed.curve(job, Placement.single("n00", range(4)), shape)
    spread = speed.curve(job, Placement.of({f"n0{i}": [0] for i in range(4)}), shape)
    total = speed.work(job)
    assert packed.seconds_to(0, total) < spread.seconds_to(0, total)
    wide = SimJob(1, 0.0, 16, app="cifar10", batch_size=4096)
    narrow = SimJob(2, 0.0, 4, app="cifar10", batch_size=4096)
    assert speed.estimate(wide, shape) < speed.estimate(narrow, shape)
    assert speed.switch_cost(job, first=True) == 30.0


def test_a_job_naming_an_application_without_tables_is_a_clear_error() -> None:
    from schedulearn.sim import SimInputError

    speed = MeasuredSpeed(None)
    with pytest.raises(SimInputError, match="--apps"):
        speed.work(SimJob(0, 0.0, 1, app="bert", batch_size=12))


def _copy_app(apps: Path, tmp_path: Path, name: str = "bert") -> Path:
    """A copy of one application's tables that a test may spoil."""
    target = tmp_path / name
    target.mkdir()
    for table in (apps / name).glob("*.csv"):
        (target / table.name).write_text(table.read_text())
    return target


def test_a_copy_of_the_tables_reads_as_the_tables(apps: Path, tmp_path: Path) -> None:
    copy, real = AppTables(_copy_app(apps, tmp_path)), AppTables(apps / "bert")
    assert copy.epoch_ends == real.epoch_ends
    assert copy.throughput((2, 2), 8) == real.throughput((2, 2), 8)


@pytest.mark.parametrize(
    ("table", "spoil", "message"),
    [
        (
            "placements.csv",
            lambda text: text.replace("step_time", "step_seconds", 1),
            r"placements.csv' lacks the column\(s\) step_time; it has placement, local_bsz",
        ),
        (
            "scalability.csv",
            lambda text: text + "4,8,16\n",
            r"scalability.csv', line \d+: 3 fields where the header names 5",
        ),
        (
            "validation-12.csv",
            lambda text: text.splitlines()[0] + "\n",
            r"validation-12.csv' has a header but no rows",
        ),
    ],
)
def test_a_spoilt_table_is_a_clear_error(
    apps: Path, tmp_path: Path, table: str, spoil: Callable[[str], str], message: str
) -> None:
    from schedulearn.sim import SimInputError

    app = _copy_app(apps, tmp_path)
    (app / table).write_text(spoil((app / table).read_text()))
    with pytest.raises(SimInputError, match=message):
        AppTables(app)
