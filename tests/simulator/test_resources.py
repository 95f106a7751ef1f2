"""What a process computes with (``simulator.resources``): torch's CPU capability and oneDNN's
instruction set, which differ where only one of them is capped, and the CPU's model."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

from methods import build_method
from methods.base import DataSpec
from simulator.resources import cpu_flags, cpu_model, cpu_numerics, onednn_isa, this_cpu_model, workspace_state_bytes
from simulator.scenario import resolve

AVX512_FLAGS = {"sse4_1", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
AVX2_FLAGS = {"sse4_1", "avx", "avx2", "fma"}


def test_onednn_uses_the_best_instruction_set_of_the_cpu_unless_capped():
    assert onednn_isa(AVX512_FLAGS, {}) == "AVX512"
    assert onednn_isa(AVX512_FLAGS - {"avx512bw"}, {}) == "AVX2"  # AVX-512 foundation alone: not oneDNN's avx512_core
    assert onednn_isa(AVX2_FLAGS, {}) == "AVX2"
    assert onednn_isa(AVX512_FLAGS, {"DNNL_MAX_CPU_ISA": "AVX2"}) == "AVX2"
    assert onednn_isa(AVX512_FLAGS, {"ONEDNN_MAX_CPU_ISA": "avx2_vnni"}) == "AVX2"
    assert onednn_isa(AVX512_FLAGS, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX", "DNNL_MAX_CPU_ISA": "AVX2"}) == "AVX512"
    assert onednn_isa(AVX2_FLAGS, {"DNNL_MAX_CPU_ISA": "AVX512_CORE"}) == "AVX2"  # a cap above the CPU: the CPU
    assert onednn_isa(AVX512_FLAGS, {"DNNL_MAX_CPU_ISA": "ALL"}) == "AVX512"
    assert onednn_isa(AVX512_FLAGS, {"DNNL_MAX_CPU_ISA": "SSE41"}) == "SSE41"
    assert onednn_isa(AVX512_FLAGS, {"ONEDNN_MAX_CPU_ISA": "AVX10_1_512_AMX"}) == "AVX512"  # AVX10: not AVX
    assert onednn_isa({"neon", "asimd"}, {}) is None


def test_the_numerics_name_onednn_only_where_it_differs_from_torchs_kernels():
    assert cpu_numerics("AVX512", "AVX512") == "AVX512"
    assert cpu_numerics("AVX2", "AVX2") == "AVX2"
    assert cpu_numerics("AVX2", None) == "AVX2"
    assert cpu_numerics("AVX2", "AVX512") == "AVX2, oneDNN AVX512"
    assert cpu_numerics("DEFAULT", "AVX2") == "DEFAULT, oneDNN AVX2"


def test_the_numerics_end_with_the_cpus_vendor_family_and_model():
    """The model a /proc/cpuinfo names for its first processor (x86: vendor, family, model; Arm:
    implementer, part); none where it names neither."""
    intel = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\n"
             "model name\t: Intel(R) Xeon(R)\n")
    amd = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\n"
    assert cpu_model(intel + "\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n") == "GenuineIntel 6/167"
    assert cpu_model(amd) == "AuthenticAMD 25/17"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert cpu_model(arm) == "Arm 0x41/0xd0c"
    assert cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") is None
    assert cpu_numerics("AVX512", "AVX512", "AuthenticAMD 25/17") == "AVX512, AuthenticAMD 25/17"
    assert cpu_numerics("AVX2", "AVX512", "GenuineIntel 6/167") == "AVX2, oneDNN AVX512, GenuineIntel 6/167"
    with open("/proc/cpuinfo") as info:
        text = info.read()
    vendor = next(line.split(":")[1].strip() for line in text.splitlines() if line.startswith("vendor_id"))
    assert this_cpu_model().startswith(f"{vendor} ") and this_cpu_model() == cpu_model(text)


PRINT_NUMERICS = "from simulator.resources import process_numerics; print(process_numerics())"


def numerics_with(**caps):
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA",
                                                              "ONEDNN_MAX_CPU_ISA")}
    done = subprocess.run([sys.executable, "-c", PRINT_NUMERICS], env={**env, **caps}, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_a_process_with_torchs_kernels_capped_alone_names_onednns_own():
    """On this machine: torch's kernels capped at the default (no vector code, which every x86 CPU
    can run) and oneDNN not: the numerics name both; with both capped, torch's alone."""
    onednn = onednn_isa(cpu_flags(), {})
    assert onednn is not None, "an x86 CPU with SSE4.1 at least"
    model = this_cpu_model()
    assert numerics_with(ATEN_CPU_CAPABILITY="default") == \
        f"torch {torch.__version__}, CPU DEFAULT, oneDNN {onednn}, {model}"
    assert numerics_with(ATEN_CPU_CAPABILITY="default", DNNL_MAX_CPU_ISA="SSE41") == \
        f"torch {torch.__version__}, CPU DEFAULT, oneDNN SSE41, {model}"
    assert numerics_with() == f"torch {torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()}, {model}"


def test_a_gpu_worker_turns_torchs_determinism_switches_on_as_its_scenario_says(monkeypatch):
    """``ray.cuda_deterministic`` reaches torch where a worker's device is a GPU (faked here: the
    switches are process-wide and set before any CUDA work), and nothing changes on a CPU worker."""
    from simulator.federation import prepare_worker_device
    from simulator.resources import cuda_determinism, process_numerics
    from simulator.scenario import load_scenario
    scenario = load_scenario("scenarios/quickstart.yaml")
    assert scenario["ray"]["cuda_deterministic"] is True
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # restored after the test
    try:
        assert prepare_worker_device(0, scenario).type == "cpu"
        assert not torch.are_deterministic_algorithms_enabled()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
        assert prepare_worker_device(0.25, scenario).type == "cuda"
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert process_numerics("cuda").endswith(", GPU Fake GPU (deterministic algorithms on)")
        prepare_worker_device(1, {**scenario, "ray": {**scenario["ray"], "cuda_deterministic": False}})
        assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
        assert process_numerics("cuda").endswith("(deterministic algorithms off)")
    finally:
        cuda_determinism(False)


def test_the_cublas_workspace_is_fixed_unless_the_user_set_one(monkeypatch):
    from simulator.resources import cuda_determinism
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    cuda_determinism(False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    cuda_determinism(False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_an_op_that_ran_without_a_deterministic_kernel_is_named_in_a_gpu_workers_numerics(monkeypatch):
    """With the switches on (``warn_only``), an op without a deterministic kernel warns and runs;
    the worker's numerics then name it rather than say only "deterministic algorithms on". ``put_``
    without accumulation has no deterministic kernel on any device, so a CPU tensor shows it here."""
    from simulator import resources
    monkeypatch.setattr(resources, "NONDETERMINISTIC_OPS", set())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    values = torch.zeros(4)
    try:
        with pytest.warns(UserWarning, match="put_ does not have a deterministic implementation") as shown:
            resources.cuda_determinism(True)
            recorder = warnings.showwarning
            resources.cuda_determinism(True)
            assert warnings.showwarning is recorder  # a second switch-on wraps nothing twice
            torch.zeros(4).add_(1.0)  # an op with a deterministic kernel: not named
            assert resources.process_numerics("cuda").endswith("(deterministic algorithms on)")
            values.put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]), accumulate=False)
        assert len(shown) == 1  # the warning is still shown, once
        assert resources.NONDETERMINISTIC_OPS == {"put_"}
        assert resources.nondeterministic_op("some other warning") is None
        assert resources.process_numerics("cuda").endswith(
            "(deterministic algorithms on; ran without a deterministic kernel: put_)")
        assert resources.process_numerics("cpu") == f"torch {torch.__version__}, CPU {resources.process_cpu_numerics()}"
    finally:
        resources.cuda_determinism(False)


@pytest.mark.parametrize("method", [
    {"name": "fedavg", "objective": "simclr"},
    {"name": "fedavg", "objective": "byol"},  # with the EMA target (encoder and projector)
    {"name": "hetero_ssfl", "objective": "byol", "rad_size": 8, "rad_batch_size": 8,  # one workspace per tier
     "tiers": [{"fraction": 0.5, "encoder": "small_cnn"}, {"fraction": 0.5, "encoder": "large_cnn"}]},
])
def test_workspace_state_bytes_counts_every_network_of_a_worker_without_allocating(synthetic_raw, method):
    scenario = resolve({**synthetic_raw, "method": method})
    spec = DataSpec(1, 28, 10, (40,) * 8)
    counted = workspace_state_bytes(build_method(scenario, spec))
    workspace = build_method(scenario, spec).make_workspace(torch.device("cpu"))
    held = 0
    for space in workspace if isinstance(workspace, list) else [workspace]:
        for networks in (space.online, space.target):
            if networks is not None:
                held += sum(t.numel() * t.element_size() for t in (*networks.parameters(), *networks.buffers()))
    assert counted == held > 0


def test_memory_is_the_resident_set_and_its_peak_in_mib(monkeypatch):
    """VmRSS is the resident set now and VmHWM its peak, both in kB in /proc: read as MiB."""
    import io
    from simulator import resources
    status = "Name:\tpython\nVmPeak:\t 9999999 kB\nVmHWM:\t 3072 kB\nVmRSS:\t 1536 kB\nVmSwap:\t 7 kB\n"
    monkeypatch.setattr(resources, "open", lambda path: io.StringIO(status), raising=False)
    assert resources.memory_mb() == {"rss_mb": 1.5, "peak_mb": 3.0}


def test_machine_memory_is_its_pages_times_the_page_size(monkeypatch):
    from simulator import resources
    sizes = {"SC_PHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(resources.os, "sysconf", lambda name: sizes[name])
    assert resources.machine_memory_bytes() == 4096000


def test_the_thread_count_is_restored_after_the_block():
    from simulator.resources import threads
    before = torch.get_num_threads()
    with threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    with threads(0):  # at least one thread
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_workspace_state_bytes_counts_each_tensors_own_element_size():
    """A float64 slot takes 8 bytes an element, an int64 counter 8, a float16 one 2, of every workspace."""
    from types import SimpleNamespace

    class Method:
        def make_workspace(self, device):
            return [SimpleNamespace(slots={"w": torch.empty(3, dtype=torch.float64), "n": torch.empty((), dtype=torch.int64)}),
                    SimpleNamespace(slots={"h": torch.empty(5, dtype=torch.float16)})]

    assert workspace_state_bytes(Method()) == 3 * 8 + 8 + 5 * 2
