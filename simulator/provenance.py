"""Which code computed a run, recorded in its ``summary.json`` as ``code``.

:func:`code_version` names the package's version and, where the package is imported from a git
checkout (the repository itself, a worktree or a clone), that checkout's commit, with ``+modified``
where tracked files of ``simulator/`` or ``methods/`` differ from it (what a run computes with;
scenarios are stored with the run, reports do not change it). It is the driver's code: workers on
other nodes of a cluster are expected to run the same (``cluster.yaml`` syncs one tree).
"""
from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("simulator", "methods")


def git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s stripped output, or None where git is missing or fails."""
    try:
        done = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def package_version() -> str:
    try:
        return metadata.version("fedssl")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_version(root: Path = ROOT) -> str:
    """``fedssl 0.1.0, git 0123456789ab`` (``+modified`` where ``root``'s ``simulator/`` or
    ``methods/`` differ from the commit), or ``fedssl 0.1.0`` where ``root`` is not the top of a git
    checkout (an installed copy inside some other repository does not take that repository's commit)."""
    version = f"fedssl {package_version()}"
    top = git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return version
    commit = git(root, "rev-parse", "--short=12", "HEAD")
    if commit is None:  # a repository without a commit
        return version
    changed = git(root, "status", "--porcelain", "--untracked-files=no", "--", *CODE_DIRS)
    return f"{version}, git {commit}" + ("+modified" if changed else "")
