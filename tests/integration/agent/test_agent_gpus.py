"""GPU discovery: NVML product names normalised to short type names, and
virtual GPUs declared with `--gpus N` behind the same interface."""

from __future__ import annotations

import pytest

from schedulearn.agent.gpus import (
    GpuDiscoveryError,
    VirtualGpus,
    discover_gpus,
    normalise_gpu_type,
)


@pytest.mark.parametrize(
    ("nvml_name", "short"),
    [
        ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti"),
        ("GeForce GTX 1080 Ti", "gtx-1080-ti"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Tesla V100-PCIE-16GB", "v100"),
        ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("NVIDIA A100-PCIE-40GB", "a100"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("Tesla K80", "k80"),
        ("Tesla P100-PCIE-16GB", "p100"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("Quadro RTX 8000", "rtx-8000"),
        ("NVIDIA TITAN Xp", "titan-xp"),
        ("NVIDIA L40S", "l40s"),
        ("Tesla M40 24GB", "m40-24gb"),
    ],
)
def test_nvml_names_become_short_type_names(nvml_name: str, short: str) -> None:
    assert normalise_gpu_type(nvml_name) == short


def test_a_name_of_only_vendor_words_still_gives_a_usable_type() -> None:
    assert normalise_gpu_type("NVIDIA") == "nvidia"


def test_virtual_gpus_are_numbered_typed_and_read_idle() -> None:
    gpus = VirtualGpus(3, "v100", node_name="n7")
    inventory = gpus.inventory()
    assert [g.index for g in inventory] == [0, 1, 2]
    assert {g.type for g in inventory} == {"v100"}
    assert len({g.uuid for g in inventory}) == 3
    assert all("n7" in g.uuid for g in inventory)
    samples = gpus.sample()
    assert [s.index for s in samples] == [0, 1, 2]
    assert all(s.utilization_pct == 0 and s.memory_used_mb == 0 for s in samples)


def test_declared_gpus_win_over_nvml() -> None:
    source = discover_gpus(2, "a100", "n1")
    assert source.kind == "virtual"
    assert [g.type for g in source.inventory()] == ["a100", "a100"]


def test_no_declaration_and_no_nvidia_driver_means_no_gpus() -> None:
    # This machine has no NVIDIA driver, so NVML does not initialise.
    source = discover_gpus(None, None, "n1")
    if source.kind == "nvml":
        pytest.skip("this host has NVIDIA GPUs")
    assert source.inventory() == []


def test_a_negative_gpu_count_is_refused_with_what_to_change() -> None:
    with pytest.raises(GpuDiscoveryError, match="--gpus must be 0 or more"):
        discover_gpus(-1, None, "n1")


class _FakeNvml:
    """NVML's Python surface for two GPUs. This machine has no NVIDIA driver,
    so the real library cannot run here; the agent's use of it is checked
    against the same calls (GPU tests run the real thing on a GPU host)."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.broken: set[int] = set()
        self.shut_down = False

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        # Older nvidia-ml-py releases return bytes.
        return b"Tesla V100-SXM2-32GB" if handle == 0 else "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        if handle in self.broken:
            raise self.NVMLError("GPU is lost")
        gib = 1024**3
        total = 32 * gib if handle == 0 else 80 * gib
        return type("Mem", (), {"total": total, "used": (handle + 1) * gib})()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        if handle in self.broken:
            raise self.NVMLError("GPU is lost")
        return type("Util", (), {"gpu": 40 + handle})()

    def nvmlShutdown(self) -> None:
        self.shut_down = True


def test_nvml_gpus_are_listed_typed_and_sampled() -> None:
    from schedulearn.agent.gpus import NvmlGpus

    nvml = _FakeNvml()
    gpus = NvmlGpus(nvml, [0, 1])
    inventory = gpus.inventory()
    assert [(g.index, g.uuid, g.type, g.memory_mb) for g in inventory] == [
        (0, "GPU-0000", "v100-32gb", 32 * 1024),
        (1, "GPU-0001", "a100-80gb", 80 * 1024),
    ]
    samples = gpus.sample()
    assert [(s.index, s.utilization_pct, s.memory_used_mb) for s in samples] == [
        (0, 40.0, 1024),
        (1, 41.0, 2048),
    ]
    # A GPU that fell off the bus reads idle; the heartbeat still goes out.
    nvml.broken.add(1)
    assert [(s.index, s.utilization_pct) for s in gpus.sample()] == [(0, 40.0), (1, 0.0)]
    assert NvmlGpus(nvml, [0], type_override="v100").inventory()[0].type == "v100"
    gpus.close()
    assert nvml.shut_down
