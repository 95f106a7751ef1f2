"""Which code computed a run: the commit of the checkout the package is imported from, marked
``+modified`` only where the code a run computes with differs from it."""
import subprocess
from pathlib import Path

from simulator.provenance import ROOT, code_version, package_version


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def checkout(root: Path) -> str:
    """A git checkout laid out as the repository (code, scenarios, README) with one commit."""
    for name in ("simulator/run.py", "methods/fedsc.py", "scenarios/a.yaml", "README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return git(root, "rev-parse", "--short=12", "HEAD")


def test_a_checkout_names_its_commit_and_whether_its_code_was_changed(tmp_path):
    commit = checkout(tmp_path)
    version = f"fedssl {package_version()}"
    assert code_version(tmp_path) == f"{version}, git {commit}"
    # a scenario, the README or an untracked file change nothing a run computes with
    (tmp_path / "scenarios" / "a.yaml").write_text("changed\n")
    (tmp_path / "README.md").write_text("changed\n")
    (tmp_path / "methods" / "new.py").write_text("untracked\n")
    assert code_version(tmp_path) == f"{version}, git {commit}"
    for name in ("methods/fedsc.py", "simulator/run.py"):
        (tmp_path / name).write_text("changed\n")
        assert code_version(tmp_path) == f"{version}, git {commit}+modified"
        git(tmp_path, "checkout", "-q", "--", name)
    assert code_version(tmp_path) == f"{version}, git {commit}"


def test_outside_a_checkout_or_below_its_top_only_the_package_version(tmp_path):
    version = f"fedssl {package_version()}"
    (tmp_path / "plain").mkdir()
    assert code_version(tmp_path / "plain") == version
    # an installed copy inside some other repository (e.g. a virtual environment's site-packages)
    # does not take that repository's commit
    checkout(tmp_path / "repo")
    (tmp_path / "repo" / "venv" / "site-packages").mkdir(parents=True)
    assert code_version(tmp_path / "repo" / "venv" / "site-packages") == version


def test_this_repository_is_named_by_its_head():
    head = git(ROOT, "rev-parse", "--short=12", "HEAD")
    assert code_version().startswith(f"fedssl {package_version()}, git {head}")


def test_a_checkout_without_a_commit_names_only_the_package_version(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "run.py").write_text("# new\n")
    assert code_version(tmp_path) == f"fedssl {package_version()}"


def test_a_staged_or_deleted_change_to_the_code_is_modified_too(tmp_path):
    """``+modified`` is the code against the commit: a change added to the index but not committed, a
    tracked file deleted, or one in a subdirectory of ``simulator/`` counts as a change in the worktree does."""
    (tmp_path / "simulator" / "evaluation").mkdir(parents=True)
    (tmp_path / "simulator" / "evaluation" / "knn.py").write_text("# knn\n")
    commit = checkout(tmp_path)
    modified = f"fedssl {package_version()}, git {commit}+modified"
    (tmp_path / "methods" / "fedsc.py").write_text("changed\n")
    git(tmp_path, "add", "methods/fedsc.py")
    assert code_version(tmp_path) == modified
    git(tmp_path, "reset", "-q", "--hard")
    (tmp_path / "simulator" / "run.py").unlink()
    assert code_version(tmp_path) == modified
    git(tmp_path, "reset", "-q", "--hard")
    (tmp_path / "simulator" / "evaluation" / "knn.py").write_text("changed\n")
    assert code_version(tmp_path) == modified


def test_a_checkout_owned_by_another_user_still_names_its_commit(tmp_path, monkeypatch):
    """A run under another account than the checkout's owner (a container's root over a mounted tree, a
    shared install): git refuses such a repository unless told it is safe, and the commit would be lost."""
    commit = checkout(tmp_path)
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # git's own switch for testing this check
    assert code_version(tmp_path) == f"fedssl {package_version()}, git {commit}"
