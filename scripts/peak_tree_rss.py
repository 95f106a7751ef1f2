"""Peak resident memory of a command's whole process tree (Ray's processes included), from /proc.

    python3 scripts/peak_tree_rss.py .venv/bin/fedssl run scenarios/quickstart.yaml --out /tmp/qs

Runs the command, sums the RSS of it and of all its descendants every 0.1 s, and prints the peak
and the wall time. Linux only; the standard library only.
"""
import os
import subprocess
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss_bytes(root: int) -> int:
    """The summed RSS of ``root`` and its descendants now (processes that vanish midway count 0)."""
    children, rss = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            pages = int(open(f"/proc/{pid}/statm").read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(pid))
        rss[int(pid)] = pages * PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: peak_tree_rss.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    start = time.time()
    process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss_bytes(process.pid))
        time.sleep(0.1)
    print(f"exit code {process.returncode}, wall {time.time() - start:.1f} s, "
          f"peak tree RSS {peak / 2**20:.0f} MiB")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
