"""Memory of the current process (Linux ``/proc``), reported by the driver and every actor, the
thread count torch uses inside a block, and the numerics a process computes with."""
from __future__ import annotations

import os
import warnings

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


# instruction-set levels, lowest first, as torch's CPU capability and oneDNN's ISA caps name them
ISA_LEVELS = ("DEFAULT", "SSE41", "AVX", "AVX2", "AVX512")


def isa_level(name: str) -> int | None:
    """Position in :data:`ISA_LEVELS` of a capability or oneDNN ISA name (``AVX512_CORE_VNNI``
    and ``AVX10_1_512`` count as AVX512, ``AVX2_VNNI`` as AVX2); None where it names none of them
    (``ALL``: no cap)."""
    name = name.upper()
    if name.startswith("AVX10"):  # oneDNN's AVX10 caps contain AVX-512 (not plain AVX, which the prefix reads)
        return ISA_LEVELS.index("AVX512")
    return next((level for level in reversed(range(len(ISA_LEVELS))) if name.startswith(ISA_LEVELS[level])), None)


def cpu_flags() -> set[str]:
    """The first CPU's ``flags`` in ``/proc/cpuinfo`` (empty where there is none, as on non-Linux
    or non-x86 machines)."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), set())
    except OSError:
        return set()


def cpu_model(cpuinfo: str) -> str | None:
    """The first CPU of ``cpuinfo`` (``/proc/cpuinfo``'s text) as its vendor, family and model
    (``GenuineIntel 6/167``), on Arm as its implementer and part (``Arm 0x41/0xd0c``); None where it
    names neither."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block ends
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "vendor_id" in fields:
        return f"{fields['vendor_id']} {fields.get('cpu family', '?')}/{fields.get('model', '?')}"
    if "CPU implementer" in fields:
        return f"Arm {fields['CPU implementer']}/{fields.get('CPU part', '?')}"
    return None


def this_cpu_model() -> str | None:
    """:func:`cpu_model` of this machine (None where ``/proc/cpuinfo`` is missing)."""
    try:
        with open("/proc/cpuinfo") as info:
            return cpu_model(info.read())
    except OSError:
        return None


def onednn_isa(flags: set[str], environ: dict[str, str]) -> str | None:
    """The instruction set oneDNN's kernels (torch's CPU convolutions) use: the best the CPU has
    (its ``flags``), capped by ``ONEDNN_MAX_CPU_ISA`` (or the older ``DNNL_MAX_CPU_ISA``) in
    ``environ``; None on a CPU that names no x86 vector extension."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        best = ISA_LEVELS.index("AVX512")
    elif "avx2" in flags:
        best = ISA_LEVELS.index("AVX2")
    elif "avx" in flags:
        best = ISA_LEVELS.index("AVX")
    elif "sse4_1" in flags:
        best = ISA_LEVELS.index("SSE41")
    else:
        return None
    cap = environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA")
    capped = isa_level(cap) if cap else None
    return ISA_LEVELS[best if capped is None else min(best, capped)]


def cpu_numerics(capability: str, onednn: str | None, model: str | None = None) -> str:
    """``capability`` (torch's own CPU kernels), followed by oneDNN's instruction set where it is
    another (as on an AVX-512 machine with ``ATEN_CPU_CAPABILITY=avx2`` alone: torch's kernels on
    AVX2, its convolutions on AVX-512, results that are neither machine's), and the CPU's ``model``
    (:func:`cpu_model`): the same instruction sets on another kind of CPU need not give the same bits
    (an Intel AVX-512 machine's 3-round fingerprints of the shipped scenarios differ from an AMD
    EPYC's, whatever oneDNN and MKL are capped to: ``tests/test_scenarios.py``)."""
    kernels = capability
    if onednn is not None and isa_level(capability) != ISA_LEVELS.index(onednn):
        kernels = f"{capability}, oneDNN {onednn}"
    return f"{kernels}, {model}" if model else kernels


def process_cpu_numerics() -> str:
    """This process's CPU kernels and CPU: :func:`cpu_numerics` of torch's capability
    (``torch.backends.cpu.get_cpu_capability()``), oneDNN's instruction set and the CPU's model."""
    onednn = onednn_isa(cpu_flags(), dict(os.environ)) if torch.backends.mkldnn.is_available() else None
    return cpu_numerics(torch.backends.cpu.get_cpu_capability(), onednn, this_cpu_model())


def process_numerics(device: torch.device | str = "cpu") -> str:
    """What decides this process's floating-point results besides the code and the seed: torch's
    version, its CPU kernels (:func:`process_cpu_numerics`) and, on a GPU, the GPU's name and
    whether torch's deterministic algorithms are on (:func:`cuda_determinism`). Runs of the same
    scenario and seed agree bitwise only where this agrees (on a GPU, only with them on)."""
    described = f"torch {torch.__version__}, CPU {process_cpu_numerics()}"
    if torch.device(device).type == "cuda":
        switches = "on" if torch.are_deterministic_algorithms_enabled() else "off"
        if NONDETERMINISTIC_OPS:
            switches += f"; ran without a deterministic kernel: {', '.join(sorted(NONDETERMINISTIC_OPS))}"
        described += f", GPU {torch.cuda.get_device_name(torch.device(device))} (deterministic algorithms {switches})"
    return described


# torch's words when, with deterministic algorithms on in warn_only mode, an op runs without one
NONDETERMINISTIC_ALERT = " does not have a deterministic implementation"
# the ops of this process that did so (:func:`record_nondeterministic_ops`)
NONDETERMINISTIC_OPS: set[str] = set()


def nondeterministic_op(message: str) -> str | None:
    """The op a warning of torch says ran without a deterministic kernel, or None for another warning."""
    op, alert, _ = message.partition(NONDETERMINISTIC_ALERT)
    return op if alert else None


def record_nondeterministic_ops() -> None:
    """From now on, each op of this process that warns that it ran without a deterministic kernel is
    noted in :data:`NONDETERMINISTIC_OPS` (and its warning still shown), so that the run's numerics
    (:func:`process_numerics`) do not say "deterministic algorithms on" of a run that cannot repeat.
    Wraps ``warnings.showwarning`` once a process; a filter that ignores torch's warnings hides them
    from it too."""
    show = warnings.showwarning
    if getattr(show, "records_nondeterministic_ops", False):
        return

    def showwarning(message, category, filename, lineno, file=None, line=None):
        op = nondeterministic_op(str(message))
        if op is not None:
            NONDETERMINISTIC_OPS.add(op)
        show(message, category, filename, lineno, file, line)

    showwarning.records_nondeterministic_ops = True
    warnings.showwarning = showwarning


def cuda_determinism(on: bool) -> None:
    """torch's determinism switches for this process's CUDA work (``ray.cuda_deterministic``).

    On: deterministic algorithms (``warn_only``: an op without a deterministic CUDA kernel warns
    and runs as it is, rather than failing the run, and the run's numerics name it:
    :func:`record_nondeterministic_ops`), cuDNN's deterministic convolutions, no cuDNN
    autotuning. Off: torch's defaults, faster, and a run does not repeat bitwise (results/gpu.md).
    cuBLAS's fixed workspace, which its determinism needs, is set either way: cuBLAS reads it once,
    when the process first uses it, so it cannot wait for the switch."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if on:
        record_nondeterministic_ops()
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False


def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``sysconf``), or None where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def workspace_state_bytes(method) -> int:
    """Bytes of the networks' state (weights and buffers, an EMA target's included) of one worker's
    workspace of ``method`` (:meth:`methods.base.Method.make_workspace`; a list of them for a
    method with one per tier), built on torch's meta device: counted, nothing allocated."""
    with torch.device("meta"):
        workspace = method.make_workspace(torch.device("meta"))
    spaces = workspace if isinstance(workspace, (list, tuple)) else [workspace]
    return sum(t.numel() * t.element_size() for space in spaces for t in space.slots.values())


def process_start_time() -> float | None:
    """When this process was launched (Unix time, from /proc), or None where /proc is missing."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


def pin_thread_count(count: int) -> None:
    """``torch``'s intra-op thread count of the calling thread set to ``count``, to stay.

    A bare ``torch.set_num_threads`` in a new thread does not stay: torch sets each thread's
    OpenMP count lazily, at the thread's first parallel operation, to the count last set by *any*
    thread of the process. In a thread of the driver that set ``count`` and then waited, the first
    operation took whatever the driver's own thread had set meanwhile (1 inside a worker slot's
    share, the driver's default outside it), so the evaluator thread ran some runs on 1 thread and
    others on 2, and its linear probe differed in its last digits between them. Asking for the
    count first runs that lazy initialisation, so the count set after it is the thread's own."""
    torch.get_num_threads()
    torch.set_num_threads(count)


class threads:
    """``torch``'s intra-op thread count set to ``count`` inside the block (restored after)."""

    def __init__(self, count: int):
        self.count = max(1, int(count))

    def __enter__(self):
        self.saved = torch.get_num_threads()
        torch.set_num_threads(self.count)

    def __exit__(self, *exc):
        torch.set_num_threads(self.saved)
