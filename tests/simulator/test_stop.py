"""Clean stops: SIGINT or SIGTERM during a run ends it with one line naming the round it reached and
the command that resumes it; no process is left behind, and the resumed run ends where an
uninterrupted one does."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from analysis.run_diff import logged_values
from tests.conftest import tiny_scenario

REPO = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    """Pids of every living process below ``pid`` (Ray's GCS, raylet, agents and workers of a run)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def assert_gone(pids: set[int], message: str) -> None:
    """The processes end within a minute (Ray's take a moment to follow their driver)."""
    deadline = time.time() + 60
    while alive(pids) and time.time() < deadline:
        time.sleep(0.5)
    assert not alive(pids), message


def fedssl(*args) -> list[str]:
    return [sys.executable, "-c", "import sys; from simulator.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def stop_during_round_2(scenario: Path, run_dir: Path, signal_number: int, command: list[str] | None = None,
                        trigger: str = "round 1/", times: int = 1) -> tuple[subprocess.CompletedProcess, set]:
    """Start ``fedssl run`` (or ``command``, another fedssl command line), send the signal as soon as
    round 1's line (a line starting with ``trigger``) is printed (``times`` = 2: 0.5 s after it, so
    that it lands in the next round, and again once the command says it noted the first, which stops
    at once rather than at the end of the round), wait for the end; returns the outcome
    and the pids of the processes the command had started by then."""
    command = command or ["run", str(scenario), "--out", str(run_dir)]
    process = subprocess.Popen(fedssl(*command), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, started = [], set()
    for line in process.stderr:
        lines.append(line)
        if line.startswith(trigger):
            started = descendants(process.pid)
            if times == 2:  # past the loop's end-of-round check, which follows the line at once: a first
                time.sleep(0.5)  # signal before it would stop the run there, gracefully, before the second
            process.send_signal(signal_number)
            if times == 2:
                for noted in process.stderr:
                    lines.append(noted)
                    if "stopping at the end of this round" in noted:
                        break
                process.send_signal(signal_number)
            break
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, "".join(lines) + err), started


def slow(raw):
    """``raw`` with rounds of a few seconds (so that a signal lands inside round 2), a checkpoint every round."""
    return {**raw, "training": {**raw["training"], "rounds": 3, "local_epochs": 4},
            "eval": {**raw["eval"], "every": 3}, "output": {"checkpoint_every": 1}}


@pytest.fixture
def slow_raw(synthetic_raw):
    """:func:`slow` of the tiny scenario in the test's own directory."""
    return slow(synthetic_raw)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The logged values of the slow scenario played through, where a stopped and resumed run must end:
    in the test process, in-process (bitwise the Ray run, tests/simulator/test_inprocess.py), once."""
    from simulator.run import run_scenario
    from simulator.scenario import resolve
    base = tmp_path_factory.mktemp("uninterrupted")
    run_dir, _ = run_scenario(resolve({**slow(tiny_scenario(base)), "executor": "in_process"}), str(base / "whole"),
                              progress=False)
    return logged_values(run_dir)


def test_sigint_in_round_2_stops_cleanly_and_the_resume_ends_where_an_uninterrupted_run_does(ray_session, slow_raw,
                                                                                            uninterrupted, tmp_path):
    from simulator.cli import main
    scenario = tmp_path / "slow.yaml"
    # both sessions on Ray from their first round (the default plays rounds in the driver while Ray starts)
    scenario.write_text(yaml.safe_dump({**slow_raw, "ray": {**slow_raw["ray"], "while_starting": "wait"}}))
    stopped, started = stop_during_round_2(scenario, tmp_path / "stopped", signal.SIGINT)
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("fedssl: stopped by SIGINT after round ") and last.endswith(
        f" of 3; resume it with: fedssl run --resume {tmp_path / 'stopped'}"), stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert len(started) >= 3  # GCS, raylet, the actors' workers...
    assert_gone(started, "processes of the run left behind")
    assert not (tmp_path / "stopped" / "summary.json").exists()

    # the resume in this process, on the tests' Ray instance: no interpreter and no Ray instance to start
    assert main(["run", "--resume", str(tmp_path / "stopped"), "--quiet"]) == 0
    assert json.loads((tmp_path / "stopped" / "summary.json").read_text())["rounds_while_ray_started"] == 0
    assert logged_values(tmp_path / "stopped") == uninterrupted


@pytest.mark.parametrize("executor", ["ray", "in_process"])
def test_sigterm_stops_a_run_with_one_line(slow_raw, tmp_path, executor):
    """(On Ray: ray.init installs its own SIGTERM handler; the command line's is put back.)"""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump({**slow_raw, "executor": executor}))
    stopped, _ = stop_during_round_2(scenario, tmp_path / "stopped", signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("fedssl: stopped by SIGTERM after round "), stopped.stderr
    assert (tmp_path / "stopped" / "checkpoints").is_dir()


@pytest.mark.parametrize("rounds, checkpoint_every, trigger, says", [
    (3, 1000, "round 1/", "it has no checkpoint yet (output.checkpoint_every), so a resume starts it over; "),
    (4, 2, "round 3/", "its last checkpoint is of round 2, the rounds since are played again; "),
])
def test_the_stop_line_says_from_which_round_a_resume_goes_on(slow_raw, tmp_path, rounds, checkpoint_every,
                                                              trigger, says):
    """Stopped at once (a second signal), a resume restarts from the newest checkpoint: the line says
    so where that is not the round reached."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump({**slow_raw, "executor": "in_process",
                                        "training": {**slow_raw["training"], "rounds": rounds},
                                        "output": {"checkpoint_every": checkpoint_every}}))
    stopped, _ = stop_during_round_2(scenario, tmp_path / "stopped", signal.SIGTERM, trigger=trigger, times=2)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    reached = int(trigger.split()[1].rstrip("/"))
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"fedssl: stopped by SIGTERM after round {reached} of {rounds}; {says}"
        f"resume it with: fedssl run --resume {tmp_path / 'stopped'}"), stopped.stderr


def test_a_first_signal_ends_the_round_under_way_checkpoints_it_and_the_resume_goes_on_from_there(
        slow_raw, uninterrupted, tmp_path, capsys):
    """No checkpoint would be due before the end (``checkpoint_every`` 1000): the signal's own
    checkpoint is what lets the resume play only the rounds after the one the signal landed in."""
    from simulator.cli import main
    raw = {**slow_raw, "executor": "in_process", "output": {"checkpoint_every": 1000}}
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    stopped, _ = stop_during_round_2(scenario, tmp_path / "stopped", signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert ("fedssl: SIGTERM: stopping at the end of this round, once its checkpoint is written "
            "(send it again to stop now)") in stopped.stderr, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    reached = int(last.removeprefix("fedssl: stopped by SIGTERM after round ").split()[0])  # 2, or 1 by a race
    assert reached < 3 and last == (f"fedssl: stopped by SIGTERM after round {reached} of 3; "
                                    f"resume it with: fedssl run --resume {tmp_path / 'stopped'}"), stopped.stderr
    assert [p.name for p in (tmp_path / "stopped" / "checkpoints").glob("round_*")] == [f"round_{reached:05d}"]

    assert main(["run", "--resume", str(tmp_path / "stopped")]) == 0  # in this process: no interpreter to start
    resumed = capsys.readouterr().err
    played = [int(line.split()[1].split("/")[0]) for line in resumed.splitlines() if line.startswith("round ")]
    assert played and min(played) == reached + 1, resumed
    assert logged_values(tmp_path / "stopped") == uninterrupted


def test_sigterm_stops_a_claim_and_leaves_no_process_behind(slow_raw, tmp_path):
    """``fedssl claim`` runs many runs in one process: a signal ends it as it ends ``fedssl run``
    (one line, exit 128 + signal, Ray's processes gone), not by the default action that left Ray's
    agents running."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump(slow_raw))
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({
        "claim": "a beats b", "seeds": [0], "primary": "linear_top1",
        "arms": {"a": {"scenario": str(scenario)}, "b": {"scenario": str(scenario), "set": ["training.lr=0.02"]}},
        "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "runs")}))
    stopped, started = stop_during_round_2(scenario, tmp_path / "runs", signal.SIGTERM,
                                           ["claim", str(suite), "--progress"])
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("fedssl: stopped by SIGTERM after round ") and last.endswith(
        "or run the claim again: it resumes that run and runs the rest"), stopped.stderr
    assert len(started) >= 3
    assert_gone(started, "processes of the claim left behind")


def test_sigterm_stops_a_sweep_with_one_line(slow_raw, tmp_path):
    """The signal lands as the sweep's second run starts, its Ray instance up since the first."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump(slow_raw))
    stopped, started = stop_during_round_2(scenario, tmp_path / "sweep", signal.SIGTERM, [
        "sweep", str(scenario), "--over", "training.lr=0.01,0.02", "--out", str(tmp_path / "sweep")],
        trigger="sweep: run 2/2")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("fedssl: stopped by SIGTERM ") and last.endswith("the same command again resumes the sweep (its finished runs kept)"), \
        stopped.stderr
    assert len(started) >= 3
    assert_gone(started, "processes of the sweep left behind")


STOPPED_AFTER_RAY_CONNECTED = """
import sys
import ray
import simulator.run
from simulator.cli import main


def connects_then_stops(scenario, out=None, **_):  # the (first) run connects; the signal lands in it
    from simulator.engine import start_ray
    start_ray(None)
    raise simulator.run.RunStopped("SIGTERM", None, None, scenario["training"]["rounds"])


simulator.run.run_scenario = connects_then_stops
scenario, out, connect_first, command = sys.argv[1:]
if connect_first == "yes":  # the caller's own connection, made before the command (fedssl's engine not imported)
    ray.init(address="local", num_cpus=1, include_dashboard=False)
sweep = ["--over", "training.lr=0.01,0.02"] if command == "sweep" else []
code = main([command, scenario, *sweep, "--out", out])
print("connected" if ray.is_initialized() else "disconnected", code, flush=True)
"""


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("connect_first, after", [("no", "disconnected"), ("yes", "connected")])
def test_a_stopped_command_disconnects_the_ray_its_runs_connected_before_its_last_line(slow_raw, tmp_path, command,
                                                                                      connect_first, after):
    """Ray forwards its processes' last log lines (e.g. a GCS line about killed actors) to the driver's
    stderr until it disconnects; a run's or a sweep's one stop line must be the last, so the command
    disconnects the Ray connection its runs made before printing it, and leaves a connection its
    caller made."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(yaml.safe_dump(slow_raw))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", STOPPED_AFTER_RAY_CONNECTED, str(scenario),
                           str(tmp_path / "out"), connect_first, command], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"{after} {128 + signal.SIGTERM}", done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("fedssl: stopped by SIGTERM"), done.stderr[-3000:]


def test_a_signal_noted_after_a_runs_last_round_stops_the_commands_next_run_before_it_starts(synthetic_raw):
    """A claim or sweep runs many runs: a signal that came during the last round of one (noted, the
    run then ended normally) stops the next one before it starts anything."""
    from simulator.run import Stopped, run_scenario, stop_signals
    from simulator.scenario import resolve
    with stop_signals():
        stop_signals.requested = "SIGTERM"
        with pytest.raises(Stopped) as stopped:
            run_scenario(resolve({**synthetic_raw, "executor": "in_process"}), "/nonexistent/never-written")
    assert stopped.value.signal_name == "SIGTERM" and stop_signals.requested is None


def test_a_signal_in_a_runs_last_round_lets_it_finish_and_stops_the_commands_next_run(synthetic_raw, tmp_path,
                                                                                     monkeypatch):
    """The last round has nothing after it to stop: its checkpoint and the summary are written as
    without a signal, and the next run of the command (a claim's, a sweep's) does not start."""
    import simulator.inprocess
    from simulator.run import Stopped, run_scenario, stop_signals
    from simulator.scenario import resolve
    run_round = simulator.inprocess.InProcessFederation.run_round

    def signalled_in_round_2(self, ctx):
        if ctx.round == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # noted: the rounds are under way
        return run_round(self, ctx)

    monkeypatch.setattr(simulator.inprocess.InProcessFederation, "run_round", signalled_in_round_2)
    scenario = resolve({**synthetic_raw, "executor": "in_process", "eval": {"enabled": False}})
    with stop_signals():
        run_dir, summary = run_scenario(scenario, str(tmp_path / "run"), progress=False)
        assert stop_signals.requested == "SIGTERM"
        assert summary["rounds_completed"] == 2 and (run_dir / "summary.json").exists()
        with pytest.raises(Stopped) as stopped:
            run_scenario(scenario, str(tmp_path / "next"), progress=False)
    assert stopped.value.signal_name == "SIGTERM" and not (tmp_path / "next").exists()


def test_the_callers_signal_handlers_are_back_after_the_block():
    from simulator.run import stop_signals
    numbers = (signal.SIGINT, signal.SIGTERM)
    saved = {number: signal.signal(number, signal.SIG_IGN) for number in numbers}  # the caller's own: ignore
    try:
        with stop_signals():
            assert all(signal.getsignal(number) == stop_signals.raise_stopped for number in numbers)
        assert all(signal.getsignal(number) == signal.SIG_IGN for number in numbers)
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_a_bare_keyboard_interrupt_is_named_after_the_last_signal_received(monkeypatch):
    """Ray may re-raise the handler's stop as a bare KeyboardInterrupt: the stop line names the signal
    that came (SIGINT, Ctrl-C's, where none did)."""
    from simulator.run import Stopped, stop_signals
    monkeypatch.setattr(stop_signals, "received", "SIGTERM")
    assert stop_signals.name_of(KeyboardInterrupt()) == "SIGTERM"
    assert stop_signals.name_of(Stopped("SIGINT")) == "SIGINT"
    monkeypatch.setattr(stop_signals, "received", None)
    assert stop_signals.name_of(KeyboardInterrupt()) == "SIGINT"


def drop_a_signal_in_a_finalizer(signal_number: int) -> None:
    """Sends the signal from within a finalizer, where Python drops the exception its handler raises
    ("Exception ignored in ..."), as it did on CI inside a weakref callback of the garbage collector
    as a sweep's second run started: the sweep then played that run to its end and exited 0."""

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal_number)
            for _ in range(10_000):  # the handler runs at one of these bytecode boundaries
                pass

    Finalized()


def test_other_exceptions_dropped_in_the_block_reach_the_hook_it_found(monkeypatch):
    """Only a stop is dropped quietly; after the block the hook it found is back."""
    from simulator.run import stop_signals
    seen = []

    def record(unraisable):
        seen.append(type(unraisable.exc_value))

    monkeypatch.setattr(sys, "unraisablehook", record)

    class Failing:
        def __del__(self):
            raise ValueError("a finalizer's own error")

    with stop_signals():
        Failing()
    assert seen == [ValueError]
    assert sys.unraisablehook is record


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # dropped quietly, no trace
def test_a_stop_dropped_in_a_finalizer_still_stops_the_command_at_the_end_of_its_block():
    from simulator.run import Stopped, stop_signals
    with pytest.raises(Stopped) as stopped:
        with stop_signals():
            drop_a_signal_in_a_finalizer(signal.SIGTERM)
            assert stop_signals.raised == "SIGTERM"  # dropped: the block goes on
    assert stopped.value.signal_name == "SIGTERM" and stopped.value.where.startswith("after the command's last run")
    assert stop_signals.pending() is None


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # dropped quietly, no trace
def test_a_stop_dropped_in_a_finalizer_stops_the_commands_next_run_before_it_starts(synthetic_raw):
    from simulator.run import Stopped, run_scenario, stop_signals
    from simulator.scenario import resolve
    with pytest.raises(Stopped):
        with stop_signals():
            drop_a_signal_in_a_finalizer(signal.SIGTERM)
            with pytest.raises(Stopped) as stopped:
                run_scenario(resolve({**synthetic_raw, "executor": "in_process"}), "/nonexistent/never-written")
            assert stopped.value.where == "between two runs"


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # dropped quietly, no trace
def test_a_stop_dropped_in_a_finalizer_as_a_run_starts_stops_it_at_its_first_rounds_end(synthetic_raw, tmp_path,
                                                                                      monkeypatch):
    """The case seen on CI: the signal's raise is dropped after the run's start-of-run check, before its
    rounds; the first round's end stops it, its checkpoint written."""
    import simulator.run
    from simulator.run import RunStopped, run_scenario, stop_signals
    from simulator.runlog import latest_checkpoint
    from simulator.scenario import resolve
    data_spec = simulator.run.data_spec

    def dropping_a_signal(*args):
        drop_a_signal_in_a_finalizer(signal.SIGTERM)
        return data_spec(*args)

    monkeypatch.setattr(simulator.run, "data_spec", dropping_a_signal)
    scenario = resolve({**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"],
                                                                              "rounds": 3}})
    with pytest.raises(RunStopped) as stopped:
        with stop_signals():
            run_scenario(scenario, str(tmp_path / "run"), progress=False)
    assert (stopped.value.signal_name, stopped.value.last_round) == ("SIGTERM", 1)
    assert latest_checkpoint(stopped.value.run_dir).name == "round_00001"  # a resume goes on from round 2


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # dropped quietly, no trace
def test_fedssl_run_whose_stop_was_dropped_ends_with_one_line_and_the_signals_code(synthetic_raw, tmp_path,
                                                                                 monkeypatch, capsys):
    import simulator.run
    from simulator.cli import main

    def runs_then_drops_a_signal(scenario, out=None, **_):
        drop_a_signal_in_a_finalizer(signal.SIGTERM)
        return Path(out), {}

    monkeypatch.setattr(simulator.run, "run_scenario", runs_then_drops_a_signal)
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump({**synthetic_raw, "executor": "in_process"}))
    try:
        code = main(["run", str(scenario), "--out", str(tmp_path / "run")])
    except KeyboardInterrupt as err:  # a Stopped let through would otherwise abort the whole pytest session
        pytest.fail(f"fedssl run let {err!r} through instead of ending with its one line")
    assert code == 128 + signal.SIGTERM
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "fedssl: stopped by SIGTERM after the command's last run ended (its results are written)", last


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # dropped quietly, no trace
@pytest.mark.parametrize("first_stop", [True, False])
def test_a_second_signal_while_the_run_shuts_down_keeps_the_runs_stop_line(synthetic_raw, tmp_path, monkeypatch,
                                                                           first_stop):
    """The first signal ended the run at a round's end (its line: the round reached, how to resume); a
    second one lands while the federation shuts down (Ray still starting, actors stopping): the run's
    stop propagates, not a bare "between two runs" stop. Where the run ended normally, the signal
    stops the command."""
    import simulator.inprocess
    import simulator.run
    from simulator.run import RunStopped, Stopped, run_scenario, stop_signals
    from simulator.scenario import resolve
    data_spec, shutdown = simulator.run.data_spec, simulator.inprocess.InProcessFederation.shutdown

    def dropping_a_signal(*args):
        drop_a_signal_in_a_finalizer(signal.SIGTERM)
        return data_spec(*args)

    def shutdown_under_a_signal(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs at one of these bytecode boundaries
            pass
        shutdown(self)

    if first_stop:
        monkeypatch.setattr(simulator.run, "data_spec", dropping_a_signal)
    monkeypatch.setattr(simulator.inprocess.InProcessFederation, "shutdown", shutdown_under_a_signal)
    scenario = resolve({**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"],
                                                                              "rounds": 3}})
    with pytest.raises((Stopped, RunStopped)) as stopped:
        with stop_signals():
            run_scenario(scenario, str(tmp_path / "run"), progress=False)
    if first_stop:
        assert isinstance(stopped.value, RunStopped)
        assert (stopped.value.signal_name, stopped.value.last_round) == ("SIGTERM", 1)
    else:
        assert not isinstance(stopped.value, RunStopped) and stopped.value.signal_name == "SIGINT"
