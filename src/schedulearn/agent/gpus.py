"""GPU discovery for the node agent: what GPUs this host has, and how busy they are.

Two sources sit behind one interface, `GpuSource`:

- `NvmlGpus` reads real NVIDIA GPUs through NVML (nvidia-ml-py): the
  inventory at registration, utilisation and memory in every heartbeat;
- `VirtualGpus` declares `--gpus N [--gpu-type T]` GPUs on a host without
  NVIDIA GPUs (tests, demos, CPU-only development). They have no meters,
  so their samples read 0 % and 0 MB.

`normalise_gpu_type` turns NVML's marketing names ("NVIDIA A100-SXM4-80GB",
"GeForce GTX 1080 Ti") into the short type names the scheduler and the
simulator's throughput tables use (`a100-80gb`, `gtx-1080-ti`, `v100`).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Protocol

from schedulearn.protocol import GpuInfo, GpuSample


class GpuSource(Protocol):
    """Where the agent learns its GPUs from."""

    @property
    def kind(self) -> str: ...

    def inventory(self) -> list[GpuInfo]: ...

    def sample(self) -> list[GpuSample]: ...

    def device_paths(self) -> dict[int, str]:
        """Each GPU's device node by index (`/dev/nvidiaN`), for the agent's device
        rules: a run may open its own GPUs' nodes and no other GPU's."""
        ...

    def close(self) -> None: ...


class GpuDiscoveryError(RuntimeError):
    """The GPUs asked for cannot be found; the message says what to change."""


# --- type names ------------------------------------------------------------

# Words that name the vendor, the product line or the board form factor,
# not the GPU: two A100-SXM4-40GB and A100-PCIE-40GB run the same jobs.
_NOISE = {"nvidia", "geforce", "tesla", "quadro", "sxm", "sxm2", "sxm3", "sxm4", "sxm5"}
_NOISE_RE = re.compile(r"^(pcie|pci-e|hbm\d*e?|gen\d)$")
_MEMORY_RE = re.compile(r"^(\d+)\s*gb$")
# Models sold in several memory sizes: the base size is dropped from the name
# (`v100`, `a100`), a larger one is kept (`v100-32gb`, `a100-80gb`).
_BASE_MEMORY_GB = {
    "v100": 16,
    "p100": 16,
    "a100": 40,
    "a800": 40,
    "h100": 80,
    "h800": 80,
    "h200": 141,
    "m40": 12,
    "k80": 12,
    "t4": 16,
    "l4": 24,
    "l40s": 48,
    "a10g": 24,
    "a40": 48,
}


def normalise_gpu_type(name: str) -> str:
    """NVML's product name -> Schedulearn's short GPU type name.

    >>> normalise_gpu_type("NVIDIA A100-SXM4-80GB")
    'a100-80gb'
    >>> normalise_gpu_type("GeForce GTX 1080 Ti")
    'gtx-1080-ti'
    """
    text = name.strip().lower().replace("_", " ")
    # "V100-SXM2-16GB" and "A100 80GB PCIe" separate their parts differently.
    text = re.sub(r"(\d)\s+gb\b", r"\1gb", text)
    words = [w for w in re.split(r"[\s\-/]+", text) if w]
    kept: list[str] = []
    memory_gb: int | None = None
    for word in words:
        if word in _NOISE or _NOISE_RE.match(word):
            continue
        match = _MEMORY_RE.match(word)
        if match:
            memory_gb = int(match.group(1))
            continue
        kept.append(word)
    if not kept:
        return re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    model = "-".join(kept)
    if memory_gb is not None and _BASE_MEMORY_GB.get(model) != memory_gb:
        return f"{model}-{memory_gb}gb"
    return model


# --- virtual GPUs ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VirtualGpus:
    """`count` declared GPUs of one type, with no meters (samples read zero)."""

    count: int
    gpu_type: str = "virtual"
    memory_mb: int = 0
    node_name: str = "node"
    kind: str = "virtual"
    # Where their device nodes are (`DIR/nvidiaN`, made by the admin or a test
    # with `mknod DIR/nvidiaN c 195 N`); None: they have none.
    device_dir: str | None = None

    def inventory(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=i,
                uuid=f"virtual-{self.node_name}-{i}",
                type=self.gpu_type,
                memory_mb=self.memory_mb,
            )
            for i in range(self.count)
        ]

    def sample(self) -> list[GpuSample]:
        return [GpuSample(index=i) for i in range(self.count)]

    def device_paths(self) -> dict[int, str]:
        if self.device_dir is None:
            return {}
        return {i: f"{self.device_dir}/nvidia{i}" for i in range(self.count)}

    def close(self) -> None:
        return None


# --- NVML ------------------------------------------------------------------


class NvmlGpus:
    """Real NVIDIA GPUs read through NVML. Construct with `NvmlGpus.open()`."""

    kind = "nvml"

    def __init__(self, nvml: Any, handles: list[Any], type_override: str | None = None) -> None:
        self._nvml = nvml
        self._handles = handles
        self._type_override = type_override

    @classmethod
    def open(cls, type_override: str | None = None) -> NvmlGpus | None:
        """NVML's GPUs, or None when there is no NVIDIA driver or no GPU."""
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return None
        try:
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError:
            pynvml.nvmlShutdown()
            return None
        if not handles:
            pynvml.nvmlShutdown()
            return None
        return cls(pynvml, handles, type_override)

    def inventory(self) -> list[GpuInfo]:
        nvml = self._nvml
        gpus = []
        for index, handle in enumerate(self._handles):
            name = _text(nvml.nvmlDeviceGetName(handle))
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    type=self._type_override or normalise_gpu_type(name),
                    memory_mb=int(memory.total // (1024 * 1024)),
                )
            )
        return gpus

    def sample(self) -> list[GpuSample]:
        nvml = self._nvml
        samples = []
        for index, handle in enumerate(self._handles):
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used // (1024 * 1024))
            except nvml.NVMLError:
                # A GPU that fell off the bus still belongs to the node; the
                # server sees it idle rather than the heartbeat failing.
                util, used = 0.0, 0
            samples.append(GpuSample(index=index, utilization_pct=util, memory_used_mb=used))
        return samples

    def device_paths(self) -> dict[int, str]:
        paths = {}
        for index, handle in enumerate(self._handles):
            with contextlib.suppress(self._nvml.NVMLError):
                paths[index] = f"/dev/nvidia{self._nvml.nvmlDeviceGetMinorNumber(handle)}"
        return paths

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


# --- choosing --------------------------------------------------------------


def device_numbers(paths: dict[int, str]) -> dict[int, tuple[int, int]]:
    """Each GPU's (major, minor) device number, read from its node; a path that is
    missing or no character device is left out (a device rule needs the numbers)."""
    numbers = {}
    for index, path in paths.items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            numbers[index] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return numbers


def discover_gpus(
    declared: int | None,
    gpu_type: str | None,
    node_name: str,
    use_nvml: bool = True,
    device_dir: str | None = None,
) -> GpuSource:
    """The GPU source for this agent.

    `declared` (`--gpus N`) wins: N virtual GPUs, even on a host with NVIDIA
    GPUs (useful to run a CPU-only agent next to a GPU one). Otherwise NVML;
    with no NVIDIA GPU the node offers none and runs CPU-only jobs.
    """
    if declared is not None:
        if declared < 0:
            raise GpuDiscoveryError(f"--gpus must be 0 or more, not {declared}")
        return VirtualGpus(
            declared, gpu_type or "virtual", node_name=node_name, device_dir=device_dir
        )
    if use_nvml:
        nvml = NvmlGpus.open(type_override=gpu_type)
        if nvml is not None:
            return nvml
    return VirtualGpus(0, gpu_type or "virtual", node_name=node_name)
