"""``scripts/peak_tree_rss.py``: the peak counts a command's descendants, not only the command."""
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "peak_tree_rss.py"

# the command holds ~10 MiB itself; its child holds 300 MiB for a second
PARENT_OF_A_BIG_CHILD = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
                         "'import time; b = bytearray(300 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(1)'])")


def test_the_peak_includes_the_commands_children():
    done = subprocess.run([sys.executable, str(SCRIPT), sys.executable, "-c", PARENT_OF_A_BIG_CHILD],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    peak = int(re.search(r"peak tree RSS (\d+) MiB", done.stdout).group(1))
    assert 300 <= peak < 400, done.stdout


def test_it_passes_on_the_commands_exit_code():
    done = subprocess.run([sys.executable, str(SCRIPT), sys.executable, "-c", "raise SystemExit(3)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "exit code 3" in done.stdout
