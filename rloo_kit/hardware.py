"""What this machine can train on: device, memory, bf16. Presets are chosen from this."""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import psutil

if TYPE_CHECKING:
    import torch

GIB = 1024**3
CPU_DTYPE_ENV = "RLOO_KIT_CPU_DTYPE"  # "auto" (default), "bf16" or "fp32"


@dataclass(frozen=True)
class Hardware:
    device: str  # "cuda", "mps" or "cpu"
    name: str
    total_memory_gb: float  # VRAM on a GPU, RAM otherwise
    free_memory_gb: float
    bf16: bool
    cpu_count: int
    cpu_bf16: bool = False  # CPU training runs its base weights in bf16 (see cpu_compute)

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"


def detect_hardware() -> Hardware:
    """Describe the first CUDA GPU if there is one, else the CPU (Apple's MPS is reported but trains as CPU).

    Returns:
        A Hardware: device, name, total and free memory in GiB (VRAM on a GPU, RAM otherwise), bf16 support,
        CPU count, and whether CPU training runs in bf16.
    """
    import torch

    cpus = os.cpu_count() or 1
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        return Hardware("cuda", torch.cuda.get_device_name(0), total / GIB, free / GIB,
                        torch.cuda.is_bf16_supported(), cpus)
    vm = psutil.virtual_memory()
    device = "mps" if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available() else "cpu"
    return Hardware(device, _cpu_name(), vm.total / GIB, vm.available / GIB, False, cpus, cpu_compute().bf16)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "CPU"


@dataclass(frozen=True)
class CpuCompute:
    """How CPU training computes: bf16 base weights (LoRA weights, gradients and Adam states stay fp32)
    or fp32 throughout; why; and the CPU flags the choice was made from."""

    bf16: bool
    reason: str
    flags: tuple[str, ...] = ()

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return torch.bfloat16 if self.bf16 else torch.float32

    def describe(self) -> str:
        return f"{'bf16' if self.bf16 else 'fp32'}: {self.reason}"


BF16_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma")  # reported


def cpu_flags() -> tuple[str, ...]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return tuple(line.split(":", 1)[1].split())
    except OSError:
        pass
    return ()


def cpu_compute(flags: tuple[str, ...] | list[str] | None = None, env: str | None = None) -> CpuCompute:
    """bf16 or fp32 for CPU training, by rules that measurements back:

    - AMX-BF16 (Xeon 4th gen+): bf16 matmuls run on the tile units, ~3x fp32 (2048^2, 2 threads:
      590 vs 195 GFLOP/s) -> bf16.
    - AVX512-BF16 without AMX (AMD Zen 4/5, Xeon 3rd gen): native bf16 dot products, ~4x fp32 measured
      on a 2-core AMD EPYC (benchmarks/results/roofline.md) -> bf16. Not everywhere: on a 2-core Intel Xeon
      with AVX512-BF16 and no AMX flag, a bf16 matmul ran at 0.5-0.6x fp32's speed and a demo step took about as
      long as fp32's (1.04x, sampling 0.81x the tokens; benchmarks/results/cpu-dtype.md); `rloo-kit doctor`
      times both (`bf16_speed`) and says where fp32's matmul is faster.
    - neither: oneDNN would emulate bf16 with conversions, slower than fp32 -> fp32.
    - and only when this PyTorch has oneDNN and a small bf16 matmul agrees with fp32 (the quick check).
    `RLOO_KIT_CPU_DTYPE=fp32|bf16` overrides the rule (`env` stands in for it in tests).
    """
    flags = tuple(cpu_flags() if flags is None else flags)
    shown = tuple(f for f in BF16_FLAGS if f in flags)
    forced = (os.environ.get(CPU_DTYPE_ENV, "auto") if env is None else env).strip().lower()
    if forced in ("fp32", "float32"):
        return CpuCompute(False, f"{CPU_DTYPE_ENV}={forced}", shown)
    if forced in ("bf16", "bfloat16"):
        return CpuCompute(True, f"{CPU_DTYPE_ENV}={forced}", shown)
    if "amx_bf16" in flags:
        native = "AMX-BF16"
    elif "avx512_bf16" in flags:
        native = "AVX512-BF16 (no AMX)"
    else:
        return CpuCompute(False, "no AVX512-BF16 or AMX-BF16 in the CPU flags: bf16 would be emulated, "
                                 "slower than fp32", shown)
    if not _bf16_matmul_ok():
        return CpuCompute(False, f"{native} present but this PyTorch's bf16 matmul failed the quick check", shown)
    return CpuCompute(True, f"{native}: native bf16 matmuls", shown)


def cpu_path_summary(choice: CpuCompute | None = None) -> str:
    """One line for `rloo-kit doctor`: the CPU training path this machine gets, and why."""
    choice = choice or cpu_compute()
    flags = ", ".join(choice.flags) or "none reported"
    how = ("bf16 base weights and LoRA compute, fp32 LoRA weights and Adam states, grouped attention"
           if choice.bf16 else "fp32 throughout")
    return f"{how} ({choice.reason}; flags: {flags}; {CPU_DTYPE_ENV}=fp32|bf16 overrides)"


def bf16_speed(m: int = 2048, k: int = 576, n: int = 1536, repeats: int = 5) -> float:
    """How fast a bf16 matmul of a small model's shape (the default model's hidden size 576, its MLP 1536) runs on
    this CPU against fp32: fp32's time over bf16's, the median of `repeats` interleaved pairs (>1: bf16 faster).
    Measured, not assumed: CPUs with the same flags differ (see `cpu_compute`)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    pairs = {torch.float32: (a, b), torch.bfloat16: (a.bfloat16(), b.bfloat16())}
    times: dict[torch.dtype, list[float]] = {dtype: [] for dtype in pairs}
    for _ in range(repeats + 1):  # the first pair warms the kernels up and is left out
        for dtype, (x, y) in pairs.items():
            start = time.perf_counter()
            x @ y
            times[dtype].append(time.perf_counter() - start)
    return statistics.median(times[torch.float32][1:]) / statistics.median(times[torch.bfloat16][1:])


def worth_timing_bf16(choice: CpuCompute) -> bool:
    """Whether `rloo-kit doctor` should time bf16 against fp32: where the CPU has a bf16 unit (CPUs with the same
    flags differ) or bf16 was forced. Without one, bf16 is emulated and the timing itself is slow (0.03x fp32's
    speed: 23 of the command's 36 s on a 2-core AMD EPYC with AVX2) to say what the flags already say."""
    return choice.bf16 or any(f in choice.flags for f in ("amx_bf16", "avx512_bf16"))


def bf16_speed_summary(choice: CpuCompute, speed: float | None) -> str:
    """One line for `rloo-kit doctor`: the measured bf16/fp32 speed, and the override where the bf16 path was
    chosen and fp32's matmul measured faster (an Intel Xeon's: its demo step no faster in bf16). speed None:
    not timed (`worth_timing_bf16`)."""
    if speed is None:
        return "not timed: no bf16 unit in this CPU (AVX512-BF16 or AMX-BF16), so bf16 would be emulated"
    line = f"a bf16 matmul runs at {speed:.2f}x fp32's speed here"
    if choice.bf16 and speed < 1:
        line += f"; the bf16 path may bring no speed on this CPU ({CPU_DTYPE_ENV}=fp32 trains in fp32)"
    return line


_BF16_OK: bool | None = None


def _bf16_matmul_ok() -> bool:
    """oneDNN is there and a (64x256)(256x64) bf16 product matches fp32 to bf16 precision (once per process)."""
    import torch

    global _BF16_OK
    if _BF16_OK is None:
        try:
            g = torch.Generator().manual_seed(0)
            a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
            want = a @ b
            got = (a.bfloat16() @ b.bfloat16()).float()
            _BF16_OK = bool(torch.backends.mkldnn.is_available()
                            and (got - want).norm() <= 2e-2 * want.norm())
        except RuntimeError:
            _BF16_OK = False
    return _BF16_OK


def hub_reachable(host: str | None = None, timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub (or the mirror HF_ENDPOINT names) answers on 443. Offline mode
    (HF_HUB_OFFLINE=1) counts as unreachable; behind a proxy the hub counts as reachable, as a direct
    connection cannot tell."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    host = host or urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


STAMPED_PACKAGES = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets", "unsloth")


def package_versions(packages: tuple[str, ...] = STAMPED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of the libraries a run depends on (None when missing): `rloo-kit doctor`
    prints them and every benchmark result is stamped with them."""
    from importlib import metadata

    versions = {}
    for pkg in packages:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return versions
