"""``fedssl run`` / ``validate`` from the command line's point of view."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.scenario import load_scenario, resolve


def write(tmp_path, raw):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_run_prints_summary_and_writes_the_run(ray_session, synthetic_raw, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(write(tmp_path, synthetic_raw)), "--out", str(out), "--quiet",
                 "--set", "training.rounds=1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"run directory: {out}" in printed
    assert json.loads((out / "summary.json").read_text())["rounds_completed"] == 1


def test_validate_accepts_a_good_scenario_and_says_how_skewed_its_partition_is(synthetic_raw, tmp_path, capsys):
    rotated = {**synthetic_raw, "partition": {"kind": "joint", "alpha": 0.5, "rotation_bins": 4}}
    assert main(["validate", str(write(tmp_path, rotated))]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{tmp_path / 'scenario.yaml'}: ok (fedavg, 8 clients, synthetic): "), line
    from simulator.data.datasets import scenario_dataset
    from simulator.data.partition import build_partition
    scenario = resolve(rotated)
    labels = scenario_dataset(scenario["dataset"], scenario["seed"]).train_y.numpy()
    stats = build_partition(scenario, labels).heterogeneity(labels)
    assert line.endswith(f": {stats['client_size_min']} to {stats['client_size_max']} images a client, "
                         f"{stats['classes_per_client']:.2f} classes on average ({stats['classes_per_client_1pct']:.2f} "
                         f"with at least 1% of its images), its largest class {stats['largest_class_share']:.0%} of "
                         f"them; class sets: {stats['distinct_class_sets']} distinct; rotations in "
                         f"{stats['rotation_bins_per_client']:.2f} of 4 bins on average"), line


def test_bad_input_is_one_line_exit_2_and_writes_nothing(synthetic_raw, tmp_path, capsys):
    out = tmp_path / "never"
    cases = [
        ({**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 5}},
         "population.clients_per_round: expected at most population.num_clients (4), got 5"),
        ({**synthetic_raw, "dataset": {"name": "cifar10", "root": str(tmp_path / "empty")}},
         "cifar10"),
        ({**synthetic_raw, "partition": {"kind": "classes_per_client", "k": 11}}, "partition"),
        # a mistyped root is an error even where the system copy of Fashion-MNIST exists
        ({**synthetic_raw, "dataset": {"name": "fashion_mnist", "root": str(tmp_path / "typo")}},
         f"dataset.root {tmp_path / 'typo'} is not a directory"),
        # with drop_last a batch larger than every client trains nothing
        ({**synthetic_raw, "training": {**synthetic_raw["training"], "drop_last": True, "batch_size": 10**6}},
         "(the largest client's samples) with training.drop_last, which skips incomplete batches: no client would "
         "take a step; got 1000000"),
        ({**synthetic_raw, "output": {"dir": str(tmp_path / "notes.txt" / "runs")}},
         f"output.dir: {tmp_path / 'notes.txt' / 'runs'}: lies under the file {tmp_path / 'notes.txt'}"),
        ({**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "cache_dir": str(tmp_path / "notes.txt")}},
         f"dataset.cache_dir: {tmp_path / 'notes.txt'}: is a file; expected a directory"),
        # widths whose weights no machine holds: not torch's allocator traceback once the run has begun;
        # the projector's two layers from the small CNN's 128 features: (128 + 1 + 32) x 10^11 floats
        ({**synthetic_raw, "model": {"hidden_dim": 10**11, "projector_dim": 32}},
         f"model: the networks' weights alone take {(128 + 1 + 32) * 10**11 * 4 / 2**30:,.1f} GiB, more than "
         f"this machine's "),
        ({**synthetic_raw, "model": {"projector_dim": 10**20}},  # past torch's 64-bit sizes
         "model: torch cannot make tensors of these widths (TypeError); expected smaller widths ("),
    ]
    (tmp_path / "notes.txt").write_text("data")
    for raw, expected in cases:
        code = main(["run", str(write(tmp_path, raw)), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith("fedssl: error: ") and expected in err
        assert err.count("\n") == 1, err
        assert not out.exists()
    assert (tmp_path / "notes.txt").read_text() == "data"


def test_used_output_directory_is_refused(synthetic_raw, tmp_path, capsys):
    out = tmp_path / "used"
    out.mkdir()
    (out / "keep.txt").write_text("data")
    assert main(["run", str(write(tmp_path, synthetic_raw)), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "data"
    assert not (tmp_path / "cache").exists()  # refused before the data (and Ray) were touched


def test_an_output_path_that_is_a_file_or_lies_under_one_is_refused(synthetic_raw, tmp_path, capsys):
    afile = tmp_path / "notes.txt"
    afile.write_text("data")
    for out, where in ((afile, "is a file"), (afile / "run", f"lies under the file {afile}")):
        assert main(["run", str(write(tmp_path, synthetic_raw)), "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"fedssl: error: {out}: {where}; expected a directory for --out\n"
    assert afile.read_text() == "data" and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("argv, prog, message", [
    (["runn"], "fedssl", "argument command: invalid choice: 'runn'"),
    (["run", "s.yaml", "--bogus"], "fedssl run", "unrecognized arguments: --bogus"),
    (["run"], "fedssl run", "expected a scenario file or --resume RUN_DIR (one of them)"),
    (["run", "s.yaml", "--resume", "runs/x"], "fedssl run", "expected a scenario file or --resume RUN_DIR (one of them)"),
    (["validate"], "fedssl validate", "the following arguments are required: scenario"),
    (["report", "a", "b", "--bogus", "-x"], "fedssl report", "unrecognized arguments: --bogus -x"),
    (["claim"], "fedssl claim", "the following arguments are required: suite"),
    (["sweep", "s.yaml", "--out", "x"], "fedssl sweep", "the following arguments are required: --over"),
    # an empty path was the current directory ("run directory: ." or ": output directory is not empty")
    (["run", "s.yaml", "--out", ""], "fedssl run", "argument --out: expected a path, got ''"),
    (["run", "--resume", ""], "fedssl run", "argument --resume: expected a path, got ''"),
    (["sweep", "s.yaml", "--over", "seed=1,2", "--out", ""], "fedssl sweep", "argument --out: expected a path, got ''"),
    (["report", "r", "--plot", ""], "fedssl report", "argument --plot: expected a path, got ''"),
    (["report", "r", "--metric", "train/loss"], "fedssl report",  # it did nothing without --plot
     "--metric names a curve of --plot DIR; expected --plot with it"),
    (["claim", "c.yaml", "--runs-dir", "a\0b"], "fedssl claim", "argument --runs-dir: expected a path, got 'a\\x00b'"),
    (["claim", "c.yaml", "--no-run", "--until", "+1h"], "fedssl claim",  # they did nothing with --no-run
     "--until stops the suite's runs, which --no-run does not start; expected one of them"),
    (["claim", "c.yaml", "--progress", "--no-run"], "fedssl claim",
     "--progress shows the suite's runs, which --no-run does not start; expected one of them"),
    (["claims", ""], "fedssl claims", "argument folder: expected a path, got ''"),
    (["claims", "a", "b"], "fedssl claims", "unrecognized arguments: b"),
])
def test_a_usage_error_is_one_line_exit_2(capsys, argv, prog, message):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error: {message}") and err.endswith(f"; see {prog} --help\n"), err
    assert err.count("\n") == 1, err


BAD_METHOD_VALUES = [  # (method section, the key the error names); one per method and rule kind
    ({"name": "fedavg", "objective": "supervised", "uv": True}, "method.uv"),
    ({"name": "fedavg", "uv_weight": -1.0}, "method.uv_weight"),
    ({"name": "fedavg", "labelled_fraction": 1.5}, "method.labelled_fraction"),
    ({"name": "fedsc", "objective": "spectral", "alpha_end": 1.5}, "method.alpha_end"),
    ({"name": "fedsc", "objective": "spectral", "share_from_round": 9}, "method.share_from_round"),
    ({"name": "fedsc", "objective": "spectral", "clip_mu": 0.0}, "method.share_clip_mu"),
    ({"name": "orchestra", "memory_size": -1}, "method.memory_size"),
    ({"name": "orchestra", "clustering": False, "degeneracy": False}, "method.clustering"),
    ({"name": "orchestra", "num_global_clusters": 10 ** 10}, "method.num_global_clusters"),  # was a crash mid-run
    ({"name": "hetero_ssfl", "objective": "simclr"}, "method.objective"),
    ({"name": "hetero_ssfl", "tiers": [{"fraction": 0.7, "encoder": "small_cnn"}]}, "method.tiers"),
    ({"name": "hetero_ssfl", "rad_size": 10000}, "method.rad_size"),  # checked against the data
]


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("method, key", BAD_METHOD_VALUES, ids=[f"{m['name']}-{k}" for m, k in BAD_METHOD_VALUES])
def test_bad_method_values_are_caught_before_anything_runs(synthetic_raw, tmp_path, capsys, command, method, key):
    """Every method's parameters are checked with the scenario: one line under the method's key,
    exit 2, nothing written (no run directory, no partition cache), from validate and run alike."""
    scenario = write(tmp_path, {**synthetic_raw, "method": method})
    out = tmp_path / "never"
    argv = ["validate", str(scenario)] if command == "validate" else ["run", str(scenario), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {scenario}: {key}: expected "), err
    assert err.count("\n") == 1, err
    assert not out.exists() and not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


def test_more_clients_than_the_partition_can_split_is_named_under_the_population_and_the_set_that_asked(
        synthetic_raw, tmp_path, capsys):
    """The partitioner's refusal of a client count is ``population.num_clients``'s (it was blamed on
    ``partition`` and on the file, where a ``--set`` of the count asked for it)."""
    scenario = write(tmp_path, synthetic_raw)
    assert main(["validate", str(scenario), "--set", "population.num_clients=5000"]) == 2
    assert capsys.readouterr().err == ("fedssl: error: --set: population.num_clients: num_clients must be between 1 "
                                       "and the number of samples (2000), got 5000\n")
    assert not (tmp_path / "cache" / "partitions").exists() or not any((tmp_path / "cache" / "partitions").iterdir())


@pytest.mark.parametrize("command", ["validate", "run"])
def test_worker_actors_a_run_s_own_ray_instance_cannot_place_are_one_line_before_anything_runs(
        synthetic_raw, tmp_path, capsys, monkeypatch, command):
    """Two actors holding every CPU of the machine each (the driver simulating none) would leave one
    waiting for ever on the run's own Ray instance: exit 2, one line under the key that set them,
    nothing written; with the driver's slot taking one of them, or on the cluster ``$RAY_ADDRESS``
    names, the same scenario is accepted."""
    from ray._private.utils import get_num_cpus

    from simulator import engine
    monkeypatch.setattr(engine.ray, "is_initialized", lambda: False)  # as in a fresh command's process
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cpus = get_num_cpus()
    ray_section = {"num_workers": 2, "worker": {"num_cpus": cpus, "num_gpus": 0.0}, "driver_simulates": False}
    scenario = write(tmp_path, {**synthetic_raw, "ray": ray_section})
    out = tmp_path / "never"
    argv = ["validate", str(scenario)] if command == "validate" else ["run", str(scenario), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"fedssl: error: {scenario}: ray.num_workers: expected worker actors that fit the {cpus} CPUs of "
                   f"this machine (the run starts a Ray instance of its own), got actors holding {2 * cpus} CPUs for "
                   f"the whole run (the driver's own slot holds none); fewer workers or CPUs a worker, or a "
                   f"cluster's ray.address\n")
    # the same value set on the command line is named as the command line's, as load_scenario's errors are
    assert main([*argv, "--set", "ray.num_workers=2"]) == 2
    assert capsys.readouterr().err.startswith("fedssl: error: --set: ray.num_workers: expected worker actors")
    import torch
    gpus = torch.cuda.device_count()
    on_gpus = write(tmp_path, {**synthetic_raw, "ray": {"num_workers": 2, "worker": {"num_cpus": 1,
                                                                                    "num_gpus": float(gpus + 1)}}})
    assert main(["validate", str(on_gpus)]) == 2
    assert capsys.readouterr().err.startswith(f"fedssl: error: {on_gpus}: ray.worker.num_gpus: expected worker "
                                              f"actors that fit the {gpus} GPUs of this machine")
    assert main(["validate", str(on_gpus), "--set", f"ray.worker.num_gpus={gpus + 1}"]) == 2  # named as --set's
    assert capsys.readouterr().err.startswith("fedssl: error: --set: ray.worker.num_gpus: expected worker actors")
    assert not out.exists() and not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()
    pools = write(tmp_path, {**synthetic_raw, "ray": {"worker_pools": [{"name": "big", "count": 2, "num_cpus": cpus,
                                                                        "num_gpus": 0.0}], "driver_simulates": False}})
    assert main(["validate", str(pools)]) == 2
    assert capsys.readouterr().err.startswith(f"fedssl: error: {pools}: ray.worker_pools: expected worker actors that "
                                              f"fit the {cpus} CPUs of this machine")
    fits = write(tmp_path, {**synthetic_raw, "ray": {**ray_section, "driver_simulates": True}})
    assert main(["validate", str(fits)]) == 0
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # ray job submit's cluster places them, not this machine
    assert main(["validate", str(write(tmp_path, {**synthetic_raw, "ray": ray_section}))]) == 0


def test_a_failed_run_in_a_sweep_is_one_line_and_a_one_round_benchmark_is_refused(synthetic_raw, tmp_path, capsys,
                                                                                    monkeypatch):
    from simulator.federation import WorkerFailure

    def failing_sweep(*args, **kwargs):
        failure = WorkerFailure("round 2, client 7, fedavg: non-finite loss (nan)")
        failure.last_checkpoint = "sweep/lr=50/checkpoints/round_00001"
        raise failure

    monkeypatch.setattr("analysis.sweep.run_sweep", failing_sweep)
    scenario = write(tmp_path, synthetic_raw)
    assert main(["sweep", str(scenario), "--over", "training.lr=0.05,50", "--out", str(tmp_path / "sweep")]) == 1
    err = capsys.readouterr().err
    assert err == ("\nfedssl: error: round 2, client 7, fedavg: non-finite loss (nan); the run stopped, its last good "
                   "checkpoint is sweep/lr=50/checkpoints/round_00001; the sweep's later runs were not started; the "
                   "same command again resumes the sweep (its finished runs kept)\n")
    # a value the command line set is named as --set's (as run's and validate's), the file's own by the file
    assert main(["benchmark", str(scenario), "--set", "training.rounds=1"]) == 2
    assert capsys.readouterr().err == ("fedssl: error: --set: training.rounds: expected at least 2 for a "
                                       "benchmark (its speeds are read from round 2 on), got 1\n")
    one_round = tmp_path / "one_round.yaml"
    one_round.write_text(yaml.safe_dump({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 1}}))
    assert main(["benchmark", str(one_round)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {one_round}: training.rounds: expected at least 2 for a "
                                       f"benchmark (its speeds are read from round 2 on), got 1\n")
    assert main(["benchmark", str(scenario), "--set", "model.hidden_dim=100000000000"]) == 2
    assert capsys.readouterr().err.startswith("fedssl: error: --set: model: the networks' weights alone take ")


def claim_suite(tmp_path, scenario: Path, *b_settings: str) -> Path:
    """A claim suite (one seed, runs in tmp_path/runs): arm a is ``scenario``, arm b the same with
    ``b_settings`` (default: training.lr=0.02), a beats b."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({
        "claim": "a beats b", "seeds": [0], "primary": "linear_top1",
        "arms": {"a": {"scenario": str(scenario)},
                 "b": {"scenario": str(scenario), "set": list(b_settings or ["training.lr=0.02"])}},
        "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "runs")}))
    return suite


@pytest.mark.parametrize("resumable", [True, False])
def test_a_failed_run_in_a_claim_is_one_line_naming_its_checkpoint(synthetic_raw, tmp_path, capsys, monkeypatch,
                                                                    resumable):
    """A failure that a resume may get past (a lost server) says to run the claim again; a failed
    client step (a diverging loss), which a resume replays, does not."""
    from simulator.federation import ServerFailure, WorkerFailure

    def failing_runs(*args, **kwargs):
        if resumable:
            raise ServerFailure("the parameter server died 3 times in round 4")
        failure = WorkerFailure("round 2, client 7, fedavg: non-finite loss (nan)")
        failure.run_dir = "runs/a/seed_0"
        raise failure

    monkeypatch.setattr("analysis.claims.run_missing", failing_runs)
    suite = claim_suite(tmp_path, write(tmp_path, {**synthetic_raw, "executor": "in_process"}))
    assert main(["claim", str(suite)]) == 1
    err = capsys.readouterr().err
    if resumable:
        assert err.endswith("\nfedssl: error: the parameter server died 3 times in round 4; the run stopped, its last "
                            "good checkpoint is none (it failed before the first); run the claim again to resume it\n")
    else:
        assert err.endswith("\nfedssl: error: round 2, client 7, fedavg: non-finite loss (nan); the run stopped, its "
                            "last good checkpoint is none (it failed before the first); resuming it would fail the "
                            "same way (a client step failed): the claim cannot go on with this arm as it is; report "
                            "the failure as a finding, or change the arm's settings and move runs/a/seed_0 away\n")


@pytest.mark.parametrize("quiet", [False, True])
def test_run_prints_a_progress_line_a_round_unless_quiet(synthetic_raw, tmp_path, capsys, quiet):
    scenario = write(tmp_path, {**synthetic_raw, "executor": "in_process", "eval": {"enabled": False},
                                "training": {**synthetic_raw["training"], "rounds": 2}})
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), *(["--quiet"] if quiet else [])]) == 0
    lines = [line.split("  ")[0] for line in capsys.readouterr().err.splitlines() if line.startswith("round ")]
    assert lines == ([] if quiet else ["round 1/2", "round 2/2"])


@pytest.mark.parametrize("last_checkpoint", [None, "runs/x/checkpoints/round_00002"])
def test_a_failed_run_says_how_to_resume_it_only_from_a_checkpoint(synthetic_raw, tmp_path, capsys, monkeypatch,
                                                                  last_checkpoint):
    """A failure a resume may get past (a lost server) names the command that resumes the run from its
    checkpoint; before the first checkpoint there is nothing to resume from."""
    import simulator.run
    from simulator.federation import ServerFailure

    def failing_run(scenario, out=None, **_):
        failure = ServerFailure("round 3: the parameter server died; it kept dying (3 restarts)")
        failure.run_dir, failure.last_checkpoint = "runs/x", last_checkpoint
        raise failure

    monkeypatch.setattr(simulator.run, "run_scenario", failing_run)
    scenario = write(tmp_path, {**synthetic_raw, "executor": "in_process"})
    assert main(["run", str(scenario), "--out", str(tmp_path / "run")]) == 1
    said = (f"its last good checkpoint is {last_checkpoint}; resume it with: fedssl run --resume runs/x"
            if last_checkpoint else "its last good checkpoint is none (it failed before the first)")
    assert capsys.readouterr().err == ("\nfedssl: error: round 3: the parameter server died; it kept dying (3 "
                                       f"restarts); the run stopped, {said}\n")


def test_a_claim_arm_whose_partition_cannot_be_made_is_one_line_before_anything_runs(synthetic_raw, tmp_path,
                                                                                    capsys):
    scenario = write(tmp_path, {**synthetic_raw, "executor": "in_process"})
    suite = claim_suite(tmp_path, scenario, "partition.kind=classes_per_client", "partition.k=11")
    assert main(["claim", str(suite)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {suite}: arms.b: partition: ") and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("stop, where", [
    ("before its first round", "runs/a/seed_0 before its first round"),
    ("before it began", "a run before its first round"),
    ("between two runs", "between two runs"),
])
def test_a_claims_deadline_line_says_where_it_stopped_the_claim(synthetic_raw, tmp_path, capsys, monkeypatch, stop,
                                                                where):
    """``--until``'s deadline landing as a run starts (Ray still starting, before its directory was
    made) or between two runs: exit 124, the line says where."""
    import simulator.deadline
    from simulator.run import RunStopped, Stopped

    class FiredAlarm(simulator.deadline.stop_at):  # the deadline came while the runs ran
        def __exit__(self, *exc):
            self.fired = True
            return super().__exit__(*exc)

    def stopped_runs(*args, **kwargs):
        if stop == "between two runs":
            raise Stopped("SIGTERM")
        raise RunStopped("SIGTERM", Path("runs/a/seed_0") if stop == "before its first round" else None, None, 2)

    monkeypatch.setattr(simulator.deadline, "stop_at", FiredAlarm)
    monkeypatch.setattr("analysis.claims.run_missing", stopped_runs)
    suite = claim_suite(tmp_path, write(tmp_path, {**synthetic_raw, "executor": "in_process"}))
    assert main(["claim", str(suite), "--until", "+3h"]) == 124
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"claim: the deadline stopped the claim {where}; run it again to go on (a stopped run resumes from its "
        f"checkpoint)")


def test_the_fedssl_command_keeps_the_exit_code_and_the_output_of_main(synthetic_raw, tmp_path):
    """``fedssl`` (``simulator.cli:command``) ends the process without the interpreter's teardown:
    its exit code and every printed line are main's, whether the run succeeds or the input is bad."""
    command = [sys.executable, "-c", "from simulator.cli import command; command()"]
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # output to a pipe is buffered
    good = write(tmp_path, {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"],
                                                                                   "rounds": 1}})
    done = subprocess.run([*command, "run", str(good), "--out", str(tmp_path / "run")], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == f"run directory: {tmp_path / 'run'}" and json.loads(lines[-1])["rounds_completed"] == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["rounds_completed"] == 1
    bad = write(tmp_path, {**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 5}})
    done = subprocess.run([*command, "validate", str(bad)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2 and done.stderr.startswith("fedssl: error: ") and done.stdout == ""


DISCONNECT_MARKED = """
import sys
import ray
shutdown = ray.shutdown
def marked_shutdown(*args, **kwargs):
    print("ray disconnected", flush=True)
    shutdown(*args, **kwargs)
ray.shutdown = marked_shutdown
from simulator.cli import main
from simulator.scenario import load_scenario, resolve
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("while_starting", ["driver", "wait"])
def test_fedssl_run_disconnects_the_ray_it_started_before_its_last_lines(synthetic_raw, tmp_path, while_starting):
    """Ray's processes forward their logs to the driver until it disconnects (a line of theirs once
    came after ``fedssl: stopped by ...``): ``fedssl run`` disconnects the Ray instance it started
    before it prints its last lines, whether the driver played the first rounds or waited for Ray."""
    scenario = write(tmp_path, {**synthetic_raw, "ray": {**synthetic_raw["ray"], "while_starting": while_starting},
                                "training": {**synthetic_raw["training"], "rounds": 2}})
    done = subprocess.run([sys.executable, "-c", DISCONNECT_MARKED, "run", str(scenario), "--out",
                           str(tmp_path / "run"), "--quiet"], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-3:-1] == ["ray disconnected", f"run directory: {tmp_path / 'run'}"], done.stdout
    assert "Token authentication is enabled" not in done.stderr  # Ray's notice of its secure default: noise
    assert "fedssl: note:" not in done.stderr  # the driver's slot and the actor compute alike (no mixed pool)


def finished_run(scenario: dict, out: str) -> tuple[Path, dict]:
    """A stand-in for ``run_scenario``: the run directory of a finished run, with its summary."""
    Path(out).mkdir(parents=True)
    (Path(out) / "summary.json").write_text(json.dumps({"rounds_completed": scenario["training"]["rounds"],
                                                         "initial": {}, "final": {}}))
    return Path(out), {"initial": {}, "final": {}, "rounds_completed": scenario["training"]["rounds"]}


def two_run_command(command: str, scenario: Path, tmp_path: Path) -> list[str]:
    """``fedssl claim`` of a suite (arms a then b, one seed; runs in tmp_path/runs) or ``fedssl sweep``
    (training.lr 0.01 then 0.02; runs in tmp_path/sweep) of two runs of ``scenario``."""
    if command == "sweep":
        return ["sweep", str(scenario), "--over", "training.lr=0.01,0.02", "--out", str(tmp_path / "sweep")]
    return ["claim", str(claim_suite(tmp_path, scenario))]


@pytest.mark.parametrize("command", ["claim", "sweep"])
def test_a_signal_between_two_runs_ends_a_claim_or_sweep_with_one_line(synthetic_raw, tmp_path, capsys, monkeypatch,
                                                                       command):
    """Between two runs (outside ``run_scenario``) a signal still ends the command with one line."""
    import simulator.run
    calls = []

    def stopped_at_the_second_run(scenario, out=None, progress=True, resume_dir=None, **_):
        calls.append(out)
        if len(calls) == 2:
            raise simulator.run.Stopped("SIGTERM")
        return finished_run(scenario, out)

    monkeypatch.setattr(simulator.run, "run_scenario", stopped_at_the_second_run)
    scenario = write(tmp_path, {**synthetic_raw, "executor": "in_process"})
    argv = two_run_command(command, scenario, tmp_path)
    hint = ("run the claim again to go on" if command == "claim" else
            "the sweep's later runs were not started; the same command again resumes the sweep (its finished runs kept)")
    monkeypatch.setattr("analysis.sweep.row_of", lambda values, summary: dict(values))
    monkeypatch.setattr("analysis.sweep.write_outputs", lambda rows, keys, out: None)
    assert main(argv) == 128 + 15
    err = capsys.readouterr().err
    assert len(calls) == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"fedssl: stopped by SIGTERM between two runs; {hint}"


@pytest.mark.parametrize("command", ["claim", "sweep"])
def test_a_stop_noted_in_a_runs_last_round_announces_no_next_run(synthetic_raw, tmp_path, capsys, monkeypatch,
                                                                 command):
    """A signal (or ``--until``'s deadline) noted in the last round of a run, which then ends normally:
    the command stops before it announces the next run or makes its folder."""
    import simulator.run
    from simulator.run import stop_signals
    calls = []

    def run_noting_a_stop(scenario, out=None, progress=True, resume_dir=None, **_):
        calls.append(out)
        stop_signals.requested = "SIGTERM"  # as the handler notes a signal during the rounds
        return finished_run(scenario, out)

    monkeypatch.setattr(simulator.run, "run_scenario", run_noting_a_stop)
    monkeypatch.setattr("analysis.sweep.row_of", lambda values, summary: dict(values))
    monkeypatch.setattr("analysis.sweep.write_outputs", lambda rows, keys, out: None)
    scenario = write(tmp_path, {**synthetic_raw, "executor": "in_process"})
    argv = two_run_command(command, scenario, tmp_path)
    announced, second = (("claim: running", tmp_path / "runs" / "b") if command == "claim"
                         else ("sweep: run", tmp_path / "sweep" / "training.lr=0.02"))
    assert main(argv) == 128 + 15
    err = capsys.readouterr().err
    assert len(calls) == 1 and not second.exists()
    assert sum(line.startswith(announced) for line in err.splitlines()) == 1, err  # the first run's line only


def test_a_ray_address_where_nothing_answers_is_one_line_not_minutes_of_retries(synthetic_raw, tmp_path, capsys,
                                                                               monkeypatch):
    """ray.init retries an address with no cluster behind it for minutes (over 200 s here) with only
    Ray's log lines; the check connects first. An address that answers passes it."""
    import socket

    from simulator import engine
    monkeypatch.setattr(engine.ray, "is_initialized", lambda: False)  # as in a fresh command's process
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused
        for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
            scenario = write(tmp_path, {**synthetic_raw, "ray": {"address": address}})
            assert main(["run", str(scenario), "--out", str(tmp_path / "never")]) == 2
            assert capsys.readouterr().err == (
                f"fedssl: error: {scenario}: ray.address: nothing answers at 127.0.0.1:{port} (Connection refused); "
                f"expected the address of a running Ray cluster's head (ray start --head, or ray up cluster.yaml), "
                f"or auto\n")
    assert main(["validate", str(write(tmp_path, {**synthetic_raw, "ray": {"address": "head-node"}}))]) == 2
    assert "ray.address: expected auto, local, HOST:PORT or ray://HOST:PORT" in capsys.readouterr().err
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        answering = {**synthetic_raw, "ray": {"address": f"127.0.0.1:{listening.getsockname()[1]}"}}
        assert engine.unreachable_address(load_scenario(write(tmp_path, answering))) is None
    assert not (tmp_path / "never").exists() and not (tmp_path / "cache").exists()


def test_drop_last_refuses_only_a_batch_larger_than_the_largest_client(synthetic_raw, tmp_path, capsys):
    """The bound is the largest client's samples (a batch of exactly that many trains it), and only
    with drop_last (otherwise the incomplete batch trains)."""
    def validate(**training):
        raw = {**synthetic_raw, "training": {**synthetic_raw["training"], **training}}
        return main(["validate", str(write(tmp_path, raw))])
    assert validate(drop_last=True, batch_size=10**6) == 2
    largest = int(capsys.readouterr().err.split("expected at most ")[1].split(" ")[0])
    assert validate(drop_last=True, batch_size=largest) == 0 and validate(drop_last=True, batch_size=largest + 1) == 2
    assert validate(drop_last=False, batch_size=10**6) == 0


def test_ray_address_forms(monkeypatch):
    """``auto``, ``local`` and no address are not checked (no host to reach); a port without a host,
    or a host without a port, is no address."""
    from simulator import engine
    monkeypatch.setattr(engine.ray, "is_initialized", lambda: False)  # as in a fresh command's process
    for address in (None, "auto", "local"):
        assert engine.unreachable_address({"ray": {"address": address}}) is None
    for address in (":6379", "head-node", "head-node:port", "ray://head-node"):
        assert engine.unreachable_address({"ray": {"address": address}}).startswith("expected auto, local, HOST:PORT")


def test_a_run_is_not_resumed_on_an_availability_trace_edited_since_it_started(synthetic_raw, tmp_path, capsys):
    """The scenario records the trace's path only: a resume after the file changed (or from another
    directory, a relative path naming another file) would go on with other clients online. The run's
    directory keeps the digest of the trace it started with; a resume on another trace is one line,
    exit 2, and the run's files stay as they were; on the same trace it passes the check."""
    from simulator.runlog import TRACE_DIGEST, new_run_dir
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n0,0\n0,1\n0,2\n0,3\n1,4\n1,5\n1,6\n1,7\n")
    raw = {**synthetic_raw, "population": {**synthetic_raw["population"], "availability_trace": str(trace)}}
    run_dir = new_run_dir(None, resolve(raw))
    assert (run_dir / TRACE_DIGEST).exists()
    recorded = sorted((p.name, p.read_bytes()) for p in run_dir.iterdir())
    trace.write_text("round,client\n0,0\n0,1\n0,2\n0,3\n1,4\n1,5\n1,6\n2,7\n")
    assert main(["run", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {run_dir / 'scenario.yaml'}: population.availability_trace: {trace} is "
                          f"not the trace the run started with (SHA-256 ") and err.count("\n") == 1
    assert err.endswith("...); expected that file as it was, to resume the run\n")
    assert sorted((p.name, p.read_bytes()) for p in run_dir.iterdir()) == recorded
    from simulator.cli import resumable
    trace.write_text("round,client\n0,0\n0,1\n0,2\n0,3\n1,4\n1,5\n1,6\n1,7\n")  # the trace as it was
    assert resumable(str(run_dir), [], None) == str(run_dir / "scenario.yaml")
