"""Memory of the current process (Linux ``/proc``), reported by the driver and every actor, the
thread count torch uses inside a block, and the numerics a process computes with."""
from __future__ import annotations

import torch


def memory_mb() -> dict[str, float]:
    """Resident set size now and its peak (VmRSS, VmHWM), in MiB; zeros where /proc is missing."""
    values = {"rss_mb": 0.0, "peak_mb": 0.0}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key = "rss_mb" if line.startswith("VmRSS") else "peak_mb"
                    values[key] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return values


def process_numerics(device: torch.device | str = "cpu") -> str:
    """What decides this process's floating-point results besides the code and the seed: torch's
    version, its CPU kernels' instruction set (``torch.backends.cpu.get_cpu_capability()``) and, on
    a GPU, the GPU's name. Runs of the same scenario and seed agree bitwise only where this agrees."""
    described = f"torch {torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()}"
    if torch.device(device).type == "cuda":
        described += f", GPU {torch.cuda.get_device_name(torch.device(device))}"
    return described


def process_start_time() -> float | None:
    """When this process was launched (Unix time, from /proc), or None where /proc is missing."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    import os
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


class threads:
    """``torch``'s intra-op thread count set to ``count`` inside the block (restored after)."""

    def __init__(self, count: int):
        self.count = max(1, int(count))

    def __enter__(self):
        self.saved = torch.get_num_threads()
        torch.set_num_threads(self.count)

    def __exit__(self, *exc):
        torch.set_num_threads(self.saved)
