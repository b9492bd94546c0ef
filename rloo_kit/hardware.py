"""What this machine can train on: device, memory, bf16. Presets are chosen from this."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psutil
import torch

GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    device: str  # "cuda", "mps" or "cpu"
    name: str
    total_memory_gb: float  # VRAM on a GPU, RAM otherwise
    free_memory_gb: float
    bf16: bool
    cpu_count: int

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"


def detect_hardware() -> Hardware:
    """Describe the first CUDA GPU if there is one, else the CPU (Apple's MPS is reported but trains as CPU)."""
    cpus = os.cpu_count() or 1
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        return Hardware("cuda", torch.cuda.get_device_name(0), total / GIB, free / GIB,
                        torch.cuda.is_bf16_supported(), cpus)
    vm = psutil.virtual_memory()
    device = "mps" if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available() else "cpu"
    return Hardware(device, _cpu_name(), vm.total / GIB, vm.available / GIB, False, cpus)


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


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub answers on 443. Offline mode (HF_HUB_OFFLINE=1) counts as unreachable."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
