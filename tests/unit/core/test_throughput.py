"""Throughput profiles, the profile table, model-name parsing and the estimator's rule."""

from __future__ import annotations

import math

import pytest

from schedulearn.core.estimator import Estimator, Source, builtin_table, feature_distance
from schedulearn.core.throughput import (
    ProfileTable,
    ThroughputProfile,
    parse_gavel_key,
    parse_model,
)


def test_model_names_are_taken_apart() -> None:
    name = parse_model("ResNet-50 (batch size 64)")
    assert (name.arch, name.batch_size, name.key, name.family, name.kind) == (
        "ResNet-50",
        64,
        "resnet50",
        "resnet",
        "vision",
    )
    assert name.params_m == pytest.approx(25.6)
    assert parse_model("resnet50 bs=32").batch_size == 32
    assert parse_model("bert-base:batch=16").family == "bert"
    assert parse_model("A3C").batch_size is None
    assert parse_model("A3C").kind == "rl"
    assert parse_model("LM (batch size 20)", batch_size=40).batch_size == 40
    assert parse_model("Recommendation (batch size 8192)").kind == "recommendation"
    assert parse_model("my-own-net").kind == ""
    assert str(parse_model("Transformer (batch size 128)")) == "Transformer (batch size 128)"


def test_gavel_keys_give_model_and_scale() -> None:
    name, scale = parse_gavel_key("('LM (batch size 20)', 4)")
    assert (name.arch, name.batch_size, name.family, scale) == ("LM", 20, "lm", 4)
    assert parse_gavel_key("('CycleGAN', 1)")[0].family == "cyclegan"
    with pytest.raises(ValueError, match="not a Gavel throughput key"):
        parse_gavel_key("ResNet-50, 1")


def test_profiles_refuse_nonsense_and_convert_samples() -> None:
    with pytest.raises(ValueError, match="positive"):
        ThroughputProfile("A3C", "k80", 0.0)
    with pytest.raises(ValueError, match="no GPU type"):
        ThroughputProfile("A3C", " ", 1.0)
    p = ThroughputProfile.from_samples("ResNet-50", "v100", 320.0, batch_size=64)
    assert p.steps_per_second == pytest.approx(5.0)
    assert p.batch_size == 64


def test_table_lookup_add_and_gavel_import() -> None:
    data = {
        "k80": {"('A3C', 1)": {"null": 2.0}, "('LM (batch size 5)', 2)": {"null": 0.0}},
        "v100": {"('A3C', 1)": {"null": 5.0}},
        "v100_unconsolidated": {"('LM (batch size 5)', 2)": {"null": 30.0}},
    }
    table = ProfileTable.from_gavel(data)
    assert table.lookup("A3C", "k80") == 2.0
    assert table.lookup("A3C", "V100") == 5.0
    assert table.lookup("LM (batch size 5)", "k80", gpu_count=2) is None  # 0.0 = not measured
    assert table.lookup("LM (batch size 5)", "v100", gpu_count=2, spread=True) == 30.0
    assert table.lookup("LM (batch size 5)", "v100", gpu_count=2) is None
    assert table.gpu_types() == ["k80", "v100"]
    before = table.version
    table.add(ThroughputProfile("A3C", "k80", 3.0))
    assert table.lookup("A3C", "k80") == 3.0 and table.version > before
    assert "A3C" in table and "ResNet-18" not in table
    assert "A3C" not in table.without([("a3c", None)])


def test_packaged_gavel_table_holds_the_26_models() -> None:
    table = builtin_table("gavel")
    assert len(table.models()) == 26
    assert table.gpu_types() == ["k80", "p100", "v100"]
    # Figures from Gavel's table: V100 runs ResNet-50 (bs 64) about 7x a K80, A3C about 2x.
    r50 = [table.lookup("ResNet-50 (batch size 64)", t) for t in ("k80", "v100")]
    a3c = [table.lookup("A3C", t) for t in ("k80", "v100")]
    assert r50[0] and r50[1] and 6.5 < r50[1] / r50[0] < 7.5
    assert a3c[0] and a3c[1] and 1.9 < a3c[1] / a3c[0] < 2.2
    with pytest.raises(ValueError, match="'gavel'"):
        builtin_table("philly")


def _table(rows: dict[str, tuple[float, float, float]]) -> ProfileTable:
    return ProfileTable(
        ThroughputProfile(model, t, rate)
        for model, rates in rows.items()
        for t, rate in zip(("k80", "p100", "v100"), rates, strict=True)
    )


def test_measured_speeds_come_back_as_measured() -> None:
    est = Estimator(_table({"A3C": (2.0, 4.0, 8.0)})).speeds("A3C", ["k80", "p100", "v100"])
    assert [s.source for s in est.types] == [Source.MEASURED] * 3
    assert [s.steps_per_second for s in est.types] == [2.0, 4.0, 8.0]
    # Relative to the geometric mean of the asked types: (2*4*8)^(1/3) = 4.
    assert [s.relative for s in est.types] == pytest.approx([0.5, 1.0, 2.0])
    assert est.fastest() == "v100"


def test_one_measurement_is_scaled_by_the_most_similar_models_ratios() -> None:
    table = _table(
        {
            "ResNet-50 (batch size 32)": (1.0, 4.0, 8.0),  # same architecture: nearest
            "A3C": (4.0, 5.0, 6.0),  # unlike: far
        }
    )
    table.add(ThroughputProfile("ResNet-50 (batch size 64)", "k80", 0.5))
    est = Estimator(table, neighbours=1).speeds("ResNet-50 (batch size 64)", ["k80", "v100"])
    assert est.of("k80").source is Source.MEASURED
    assert est.of("v100").source is Source.SIMILAR
    # k80 0.5 x (ResNet-50 bs32's v100/k80 = 8): 4.0 steps/s.
    assert est.of("v100").steps_per_second == pytest.approx(4.0)
    assert est.basis == ("ResNet-50 (batch size 32)",)


def test_matching_speedups_outweigh_names_when_two_types_are_measured() -> None:
    table = _table(
        {
            "Transformer (batch size 32)": (1.0, 0.5, 9.0),  # same name, unlike ratios
            "LM (batch size 20)": (1.0, 3.0, 6.0),  # other family, same p100/k80 ratio
        }
    )
    table.add(ThroughputProfile("Transformer (batch size 64)", "k80", 2.0))
    table.add(ThroughputProfile("Transformer (batch size 64)", "p100", 6.0))
    est = Estimator(table, neighbours=1).speeds("Transformer (batch size 64)", ["v100"])
    assert est.basis == ("LM (batch size 20)",)
    # Anchored on both measurements: 2 x 6/1 and 6 x 6/3 agree on 12.
    assert est.of("v100").steps_per_second == pytest.approx(12.0)


def test_an_unmeasured_model_takes_its_neighbours_relative_profile() -> None:
    table = _table(
        {
            "Transformer (batch size 32)": (1.0, 2.0, 4.0),
            "Transformer (batch size 128)": (0.25, 0.5, 1.0),
            "A3C": (5.0, 5.0, 5.0),
        }
    )
    est = Estimator(table, neighbours=2).speeds("Transformer (batch size 64)", ["k80", "v100"])
    assert all(s.source is Source.SIMILAR for s in est.types)
    assert est.relative("v100") / est.relative("k80") == pytest.approx(4.0)
    # Same architecture at other batch sizes: steps/s scale with the batch-size ratio.
    assert est.of("v100").steps_per_second == pytest.approx(2.0)
    assert set(est.basis) == {"Transformer (batch size 32)", "Transformer (batch size 128)"}


def test_unknown_everything_is_the_labelled_type_agnostic_default() -> None:
    est = Estimator(builtin_table("gavel"))
    for model in (None, "", "my-own-net"):
        speeds = est.speeds(model, ["k80", "v100"])
        assert speeds.is_default
        assert [s.relative for s in speeds.types] == [1.0, 1.0]
        assert all(s.steps_per_second is None for s in speeds.types)
    # A type nobody profiled is the average type for every model.
    a100 = est.speeds("A3C", ["k80", "a100"]).of("a100")
    assert (a100.source, a100.relative) == (Source.DEFAULT, 1.0)


def test_a_configuration_nobody_measured_falls_back_to_one_gpu() -> None:
    est = Estimator(builtin_table("gavel")).speeds("A3C", ["k80", "v100"], gpu_count=4)
    assert est.gpu_count == 1
    assert est.relative("v100") / est.relative("k80") == pytest.approx(7.1758 / 3.4394, rel=1e-3)


def test_estimates_follow_new_profiles() -> None:
    table = _table({"A3C": (2.0, 4.0, 8.0)})
    estimator = Estimator(table)
    assert estimator.speeds("CycleGAN", ["k80", "v100"]).is_default
    table.add(ThroughputProfile("CycleGAN", "k80", 1.0))
    assert estimator.speeds("CycleGAN", ["k80"]).of("k80").source is Source.MEASURED


def test_feature_distance_orders_architecture_family_kind() -> None:
    r50 = parse_model("ResNet-50 (batch size 64)")
    same_arch = feature_distance(r50, parse_model("ResNet-50 (batch size 32)"))
    same_family = feature_distance(r50, parse_model("ResNet-18 (batch size 64)"))
    same_kind = feature_distance(r50, parse_model("VGG16 (batch size 64)"))
    unlike = feature_distance(r50, parse_model("A3C"))
    assert same_arch < same_family < same_kind < unlike
    assert math.isclose(same_arch, 0.25)
