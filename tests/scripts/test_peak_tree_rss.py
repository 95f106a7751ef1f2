"""``scripts/peak_tree_rss.py``: the peak counts a command's descendants, not only the command."""
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "peak_tree_rss.py"

# the command holds ~10 MiB itself; its child holds 300 MiB for a second
PARENT_OF_A_BIG_CHILD = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
                         "'import time; b = bytearray(300 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(1)'])")


def run_script(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *command], capture_output=True, text=True, timeout=60)


def peak_mib(done: subprocess.CompletedProcess) -> int:
    assert done.returncode == 0, done.stderr
    return int(re.search(r"peak tree RSS (\d+) MiB", done.stdout).group(1))


def load_script():
    spec = importlib.util.spec_from_file_location("peak_tree_rss", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_peak_includes_the_commands_children():
    done = run_script(sys.executable, "-c", PARENT_OF_A_BIG_CHILD)
    assert done.returncode == 0, done.stderr
    peak = int(re.search(r"peak tree RSS (\d+) MiB", done.stdout).group(1))
    assert 300 <= peak < 400, done.stdout


def test_the_peak_includes_the_childrens_children():
    """The 300 MiB are held by the command's grandchild: the walk descends the whole tree."""
    grandparent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {PARENT_OF_A_BIG_CHILD!r}])"
    assert 300 <= peak_mib(run_script(sys.executable, "-c", grandparent)) < 400


def test_the_peak_is_the_largest_sample_not_the_last():
    """The child's 300 MiB are gone for the command's last second: the peak keeps them."""
    assert peak_mib(run_script(sys.executable, "-c", PARENT_OF_A_BIG_CHILD + "; import time; time.sleep(1)")) >= 300


def test_the_peak_is_resident_memory_not_address_space():
    """1 GiB mapped but never touched: in the address space (VmSize), not resident."""
    untouched = "import mmap, time; m = mmap.mmap(-1, 2**30); time.sleep(1)"
    assert peak_mib(run_script(sys.executable, "-c", untouched)) < 100


def test_a_leaf_process_counts_its_own_resident_memory():
    """A process without children: its tree's RSS is its own, /proc/PID/status's VmRSS."""
    tree_rss_bytes = load_script().tree_rss_bytes
    sleeper = subprocess.Popen(["sleep", "30"])

    def vm_rss() -> int:
        status = Path(f"/proc/{sleeper.pid}/status").read_text()
        return 1024 * int(re.search(r"^VmRSS:\s+(\d+) kB$", status, re.M).group(1))

    try:
        for _ in range(100):  # until it has settled in its sleep: the same RSS before and after
            before, tree, after = vm_rss(), tree_rss_bytes(sleeper.pid), vm_rss()
            if before == after and Path(f"/proc/{sleeper.pid}/cmdline").read_bytes() == b"sleep\x0030\x00":
                break
            time.sleep(0.05)
        assert before > 0 and tree == before
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_that_vanished_counts_0(monkeypatch):
    """A process listed in /proc but gone before its files are read counts 0, as does a gone root."""
    module = load_script()
    gone = subprocess.Popen(["true"])
    gone.wait()
    listed = os.listdir("/proc") + [str(gone.pid)]
    monkeypatch.setattr(module.os, "listdir", lambda path: listed)
    assert module.tree_rss_bytes(gone.pid) == 0


def test_it_passes_on_the_commands_exit_code():
    done = run_script(sys.executable, "-c", "raise SystemExit(3)")
    assert done.returncode == 3 and "exit code 3" in done.stdout


def test_it_prints_one_line_with_the_wall_time_and_not_the_commands_output():
    done = run_script(sys.executable, "-c", "import time; print('from the command'); time.sleep(0.5)")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stdout
    wall = float(re.search(r"wall (\d+\.\d) s", done.stdout).group(1))
    assert 0.5 <= wall < 30, done.stdout


def test_a_command_without_arguments_runs():
    done = run_script("true")
    assert done.returncode == 0 and done.stdout.startswith("exit code 0, "), done.stderr


def test_no_command_is_the_usage_exit_2():
    done = run_script()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "usage: peak_tree_rss.py COMMAND [ARGS...]\n"
