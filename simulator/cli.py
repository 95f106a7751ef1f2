"""``fedssl``: run or validate a scenario, sweep or benchmark it, tabulate finished runs or evaluate them
again, compare two runs value by value (``diff``), run and decide a claim suite, list every kept claim
report at a glance (``claims``), and list every kept run against the learning margins (``ledger``).

Bad input (an invalid scenario, missing data, an impossible partition, a used output directory)
prints one line ``fedssl: error: ...`` and exits with code 2, before anything is written; a usage
error (an unknown option, a missing argument) prints ``fedssl CMD: error: ...; see fedssl CMD --help``,
also with code 2.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
from pathlib import Path

from simulator.scenario import ScenarioError, load_scenario, named_as_set


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser (and, through ``add_subparsers``, its commands') whose usage errors are one line,
    ``fedssl run: error: ...; see fedssl run --help``, and exit code 2, as every other bad input."""

    commands: dict[str, argparse.ArgumentParser] = {}  # the top-level parser's, by name (set by parser())

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown option is reported by the command it was given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.commands.get(getattr(parsed, "command", None), self).error(
                f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def path_argument(text: str) -> str:
    """A file or directory option's value: not empty (``--out ''`` meant the current directory), no NUL."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fedssl", description="Federated self-supervised learning simulator")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("run", "run a scenario"), ("validate", "check a scenario and its data")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("scenario", nargs="?" if name == "run" else None, help="scenario YAML file")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a scenario key, e.g. --set training.rounds=5 (repeatable)")
        if name == "run":
            cmd.add_argument("--out", type=path_argument,
                             help="run directory (default: <output.dir>/<name>-<timestamp>)")
            cmd.add_argument("--resume", metavar="RUN_DIR", type=path_argument,
                             help="continue an interrupted run from its newest checkpoint")
            cmd.add_argument("--quiet", action="store_true", help="no per-round progress lines")
    sweep = sub.add_parser("sweep", help="run a scenario over a grid of values; table and plots")
    sweep.add_argument("scenario", help="scenario YAML file")
    sweep.add_argument("--over", action="append", required=True, metavar="KEY=V1,V2,...",
                       help="a swept key and its values (repeatable: the grid is their product)")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    sweep.add_argument("--out", required=True, type=path_argument,
                       help="directory for the runs, sweep.parquet, sweep.md, plots")
    bench = sub.add_parser("benchmark", help="the simulator's throughput against a plain training loop")
    bench.add_argument("scenario", help="scenario YAML file")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    for name, text, runs_help in (
            ("report", "table of finished runs (mean ± std over seeds, per-seed rows)", "run directories"),
            ("evaluate", "evaluate finished runs again with other eval settings; the same table",
             "run directories (their round-0 and newest-checkpoint encoders)")):
        table = sub.add_parser(name, help=text)
        table.add_argument("runs", nargs="+", help=runs_help)
        table.add_argument("--baseline", metavar="NAME",
                           help="also print each scenario minus this scenario, paired by seed")
        table.add_argument("--margin", dest="margins", action="append", metavar="METRIC=POINTS",
                           help="a learning margin over the run's round-0 network (repeatable; default: "
                                "linear_top1=4 and knn_top1=2, the protocol's; a metric not given keeps its own)")
        if name == "report":
            table.add_argument("--plot", metavar="DIR", type=path_argument,
                               help="also write learning curves (mean ± std over seeds) to DIR, new or empty: PNGs, "
                                    "curves.parquet")
            table.add_argument("--metric", dest="metrics", action="append", metavar="NAME",
                               help="a metrics.parquet name to plot (repeatable; default: kNN, linear probe, loss)")
        if name == "evaluate":
            table.add_argument("--set", dest="overrides", action="append", default=[], metavar="eval.KEY=VALUE",
                               help="change an evaluation setting, e.g. --set eval.train_subset=null (repeatable)")
    ledger = sub.add_parser("ledger", help="which shipped scenarios learn on which seeds: kept runs matched to the "
                                           "scenario files as shipped, against the learning margins")
    ledger.add_argument("runs", nargs="*", default=["results/runs"],
                        help="folders searched for finished runs (default: results/runs)")
    ledger.add_argument("--scenarios", default="scenarios", help="the shipped scenarios' folder (default: scenarios)")
    ledger.add_argument("--margin", dest="margins", action="append", metavar="METRIC=POINTS",
                        help="a learning margin over the run's round-0 network (repeatable; default: "
                             "linear_top1=4 and knn_top1=2, the protocol's; a metric not given keeps its own)")
    claims = sub.add_parser("claims", help="every kept claim report of a folder at a glance: each deciding "
                                           "comparison's interval and verdict and its arms' round 0 and final, "
                                           "recomputed from the runs each report names")
    claims.add_argument("folder", nargs="?", default="results/claims", type=path_argument,
                        help="folder of claim reports (default: results/claims)")
    diff = sub.add_parser("diff", help="two runs value by value: does B reproduce A (exit 0), or not (exit 1)")
    diff.add_argument("run_a", help="run directory")
    diff.add_argument("run_b", help="run directory (compared up to the last round both logged)")
    claim = sub.add_parser("claim", help="run a claim suite's unfinished runs, then print its table and verdict")
    claim.add_argument("suite", help="claim suite YAML file (claims/*.yaml)")
    claim.add_argument("--runs-dir", metavar="DIR", type=path_argument,
                       help="directory of the suite's runs (default: the suite's out)")
    claim.add_argument("--progress", action="store_true", help="per-round progress lines of each run")
    claim.add_argument("--arms", metavar="A,B,...", help="only these arms of the suite (run and shown), with the "
                                                         "comparisons between them; they must include a deciding "
                                                         "comparison's arms")
    claim.add_argument("--until", metavar="HH:MM|+DURATION",
                       help="stop at this local time (its next occurrence) or after this long (+45m, +2h30m): "
                            "the run under way ends its round and checkpoint, no later run starts, the table "
                            "over the seeds finished so far is printed and the exit code is 124; run the "
                            "claim again to resume")
    claim.add_argument("--no-run", action="store_true",
                       help="run nothing: print the table over the seeds finished in every arm (an interim one, "
                            "without a verdict, until every seed has finished)")
    p.commands = dict(sub.choices)
    return p


def report(run_dirs: list[str], baseline: str | None, overrides: list[str] | None = None,
           plot: str | None = None, metrics: list[str] | None = None, margins: list[str] | None = None) -> int:
    """``fedssl report`` (the runs' own numbers, and their learning curves in ``plot``) or, with
    ``overrides`` given, ``fedssl evaluate``."""

    from analysis.report import (code_line, learning_table, markdown_table, numerics_line, paired_table, parse_margins,
                                 pixel_table, read_run)
    from simulator.data.datasets import DatasetUnavailable
    try:
        learning_margins = parse_margins(margins)
        if plot:  # as run --out: a folder of earlier curves or plots is never written over
            from simulator.runlog import check_out
            check_out(plot, "--plot")
        if overrides is None:
            runs = [read_run(Path(d)) for d in run_dirs]
        else:
            from analysis.reevaluate import evaluate_run
            from simulator.evaluation.monitor import EvaluationCache
            cache = EvaluationCache()  # the runs' shared pixels and round-0 networks evaluated once
            runs = [evaluate_run(Path(d), overrides, cache) for d in run_dirs]
        from analysis.claims import same_name_notes
        for note in same_name_notes(runs):
            print(note, file=sys.stderr)
        tables = [markdown_table(runs), learning_table(runs, learning_margins)]
        tables += [table] if (table := pixel_table(runs)) else []
        tables += [paired_table(runs, baseline)] if baseline is not None else []  # --baseline '' names none
        tables += [code_line(runs) + "\n", numerics_line(runs) + "\n"]
        if plot:
            from analysis.curves import DEFAULT_METRICS, learning_curves, write_curves
            paths = write_curves(learning_curves(runs, tuple(metrics or DEFAULT_METRICS)), Path(plot))
            tables.append("curves: " + ", ".join(str(p) for p in paths) + "\n")
    except (ValueError, OSError, DatasetUnavailable) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(tables), end="")
    return 0


def ledger(args) -> int:
    """``fedssl ledger``."""
    from analysis.ledger import ledger as ledger_text
    from analysis.report import parse_margins
    try:
        text = ledger_text([Path(d) for d in args.runs], Path(args.scenarios), parse_margins(args.margins))
    except (ValueError, OSError, ScenarioError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


def claims(args) -> int:
    """``fedssl claims``."""
    from analysis.claims_index import claims_index
    try:
        text = claims_index(Path(args.folder))
    except (ValueError, OSError, ScenarioError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def diff(args) -> int:
    """``fedssl diff``: 0 where B reproduces A bitwise, 1 where it does not, 2 for bad input."""
    from analysis.run_diff import diff_text
    try:
        text, reproduces = diff_text(Path(args.run_a), Path(args.run_b))
    except (ValueError, OSError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0 if reproduces else 1


RESUME_SWEEP = ("the sweep's later runs were not started; the same command again resumes the sweep (its finished "
                "runs kept)")


def study(args) -> int:
    """``fedssl sweep`` and ``fedssl benchmark``."""

    from simulator.data.datasets import DatasetUnavailable
    from simulator.federation import RunFailure
    from simulator.run import RunStopped, ray_connection_of_the_command, stop_signals
    try:
        if args.command == "sweep":
            from analysis.sweep import markdown, run_sweep
            with stop_signals(), ray_connection_of_the_command():
                rows = run_sweep(args.scenario, args.over, args.overrides, Path(args.out), progress=False,
                                 check=check_before_running, check_resume=check_before_resuming)
            print(markdown(rows), end="")
        else:
            from analysis.benchmark import format_results, run_benchmark
            scenario = load_scenario(args.scenario, args.overrides)
            try:  # as run's: a value the command line set is named as --set's
                if scenario["training"]["rounds"] < 2:
                    raise ScenarioError(args.scenario, "training.rounds", "expected at least 2 for a benchmark (its "
                                        f"speeds are read from round 2 on), got {scenario['training']['rounds']}")
                check_before_running(scenario, args.scenario)
            except ScenarioError as err:
                raise named_as_set(err, args.overrides) from None
            print(format_results(run_benchmark(scenario)), end="")
    except (RunStopped, KeyboardInterrupt) as err:
        return stopped(err, RESUME_SWEEP)
    except (RunFailure, FloatingPointError) as err:  # a run's failure; the benchmark's plain loop raises the latter
        return failed(err, RESUME_SWEEP if args.command == "sweep" else "the benchmark's later modes were not started")
    except (ScenarioError, DatasetUnavailable, FileExistsError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    return 0


def failed(err: Exception, then: str | None = None) -> int:
    """The one line of a command whose run failed (``then``: what the user can do next); exit code 1.
    ``err``: a :class:`simulator.federation.RunFailure`, whose line names the run's last good
    checkpoint, or the benchmark's plain loop's ``FloatingPointError``."""
    stop = ""
    if hasattr(err, "last_checkpoint"):
        checkpoint = err.last_checkpoint or "none (it failed before the first)"
        stop = f"; the run stopped, its last good checkpoint is {checkpoint}"
    print(f"\nfedssl: error: {err}{stop}{f'; {then}' if then else ''}", file=sys.stderr)
    return 1


def stopped(err: BaseException, then: str | None = None) -> int:
    """The one line of a command that a signal stopped (``then``: what the user can do next); its exit
    code, 128 + the signal. ``err``: a run's :class:`simulator.run.RunStopped`, or the signal's
    ``KeyboardInterrupt`` where it landed between two runs of a claim or sweep."""
    from simulator.run import RunStopped, stop_signals
    if isinstance(err, RunStopped):
        name, text = err.signal_name, str(err)
    else:
        name = stop_signals.name_of(err)
        text = f"stopped by {name} {getattr(err, 'where', 'between two runs')}"
    print(f"\nfedssl: {text}" + (f"; {then}" if then else ""), file=sys.stderr)
    return 128 + getattr(signal, name)


def resumable(run_dir: str, overrides: list[str], out: str | None) -> str:
    """The scenario file of a run that can be resumed; raises ScenarioError otherwise."""
    from simulator.runlog import check_client_states, check_run_dir, check_trace_unchanged, checkpoint_round, \
        latest_checkpoint, load_recorded_scenario
    path = Path(run_dir)
    if overrides:
        raise ScenarioError(run_dir, "--set", "a resumed run keeps its scenario; drop --set")
    if out:
        raise ScenarioError(run_dir, "--out", "a resumed run goes on in its own directory; drop --out")
    check_run_dir(path)
    if (path / "summary.json").exists():
        raise ScenarioError(run_dir, "-", "the run has finished (summary.json exists); nothing to resume")
    scenario = load_recorded_scenario(path)
    check_trace_unchanged(path, scenario)
    rounds = scenario["training"]["rounds"]
    checkpoint = latest_checkpoint(path)
    if checkpoint is not None:
        if checkpoint_round(checkpoint) > rounds:
            raise ScenarioError(str(path / "scenario.yaml"), "training.rounds",
                                f"expected at least {checkpoint_round(checkpoint)} (the round of its newest "
                                f"checkpoint, {checkpoint}), got {rounds}")
        check_checkpoint_fits_scenario(scenario, checkpoint)  # readable, and of these networks, before anything starts
        check_client_states(checkpoint)
    return str(path / "scenario.yaml")


def check_before_resuming(run_dir: Path) -> None:
    """A claim's or sweep's interrupted run: :func:`resumable`, then :func:`check_before_running` on its
    recorded scenario; raises ScenarioError (or the data's error) before anything starts."""
    from simulator.runlog import load_recorded_scenario
    source = resumable(str(run_dir), [], None)
    check_before_running(load_recorded_scenario(Path(run_dir)), source)


def claim(args) -> int:
    """``fedssl claim SUITE.yaml``: run what is unfinished (resume the interrupted), then print the
    claim's table and verdict. A bad suite is one error line and exit 2 before anything is written."""

    from analysis.claims import arm_scenarios, read_suite, restrict_to_arms, run_missing, run_states, stale_notes
    from simulator.data.datasets import DatasetUnavailable
    from simulator.runlog import check_directory_path
    from simulator.deadline import Deadline, stop_at
    try:
        deadline = Deadline.parse(args.until) if args.until is not None else None
        suite = read_suite(args.suite)
        if args.arms is not None:
            suite = restrict_to_arms(suite, [name.strip() for name in args.arms.split(",")])
        scenarios = arm_scenarios(suite)
        runs_dir = Path(args.runs_dir or suite.out)
        check_directory_path(runs_dir, "--runs-dir" if args.runs_dir else f"{suite.path}'s out")
        states = run_states(suite, scenarios, runs_dir)
        notes = stale_notes(scenarios, states)
        if args.no_run:
            for note in notes:
                print(note, file=sys.stderr)
            return interim_claim(suite, states, runs_dir)
        for state in states:  # every run to start or resume: its data at hand, before any runs
            if state.state == "new":
                check_before_running(scenarios[state.arm, state.seed], f"{suite.path}: arms.{state.arm}")
            elif state.state == "interrupted":
                check_before_resuming(state.run_dir)
    except (ScenarioError, DatasetUnavailable, FileExistsError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr)
    from simulator.federation import RunFailure
    from simulator.run import RunStopped, ray_connection_of_the_command, stop_signals
    alarm = stop_at(deadline)
    if deadline is not None:
        print(f"claim: runs stop at {deadline}", file=sys.stderr)
    try:
        with stop_signals(), ray_connection_of_the_command(), alarm:
            run_missing(suite, scenarios, states, progress=args.progress)
    except (RunStopped, KeyboardInterrupt) as err:
        if alarm.fired:
            return deadline_reached(err, suite, scenarios, runs_dir)
        resumable_run = isinstance(err, RunStopped) and err.run_dir is not None
        return stopped(err, "or run the claim again: it resumes that run and runs the rest" if resumable_run
                       else "run the claim again to go on")
    except RunFailure as err:
        return failed(err, "run the claim again to resume it" if err.resumable else
                      f"resuming it would fail the same way (a client step failed): the claim cannot go on with this "
                      f"arm as it is; report the failure as a finding, or change the arm's settings and move "
                      f"{err.run_dir} away")
    except ScenarioError as err:  # a file of a run that went bad while the claim ran
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    return print_claim_table(suite, runs_dir)


def deadline_reached(err: BaseException, suite, scenarios, runs_dir: Path) -> int:
    """``fedssl claim --until``: the line saying where the deadline stopped the claim, the table over
    the seeds finished so far, and exit code 124 (as ``timeout``'s); where every run had finished, the
    claim's table and its exit code."""
    from analysis.claims import run_states
    from simulator.run import RunStopped
    states = run_states(suite, scenarios, runs_dir)
    if all(state.state == "finished" for state in states):  # it came as the last run ended: nothing was stopped
        print("\nclaim: the deadline came after every run had finished", file=sys.stderr)
        return print_claim_table(suite, runs_dir)
    if not isinstance(err, RunStopped):
        where = "between two runs"
    elif err.last_round is None:
        where = f"{err.run_dir or 'a run'} before its first round"
    else:
        where = f"{err.run_dir} after round {err.last_round} of {err.rounds}"
    print(f"\nclaim: the deadline stopped the claim {where}; run it again to go on (a stopped run resumes from "
          f"its checkpoint)", file=sys.stderr)
    interim_claim(suite, states, runs_dir)
    return 124


def interim_claim(suite, states, runs_dir) -> int:
    """``fedssl claim --no-run``: the table over the seeds finished in every arm, running nothing."""
    import dataclasses

    from analysis.claims import finished_seeds
    done = finished_seeds(suite, states)
    if not done:
        runs_finished = sum(state.state == "finished" for state in states)
        print(f"claim: no seed has finished in every arm yet ({runs_finished} of {len(states)} runs finished in "
              f"{runs_dir}); nothing to show")
        return 0
    pending = tuple(seed for seed in suite.seeds if seed not in done)
    return print_claim_table(dataclasses.replace(suite, seeds=done), runs_dir, pending)


def print_claim_table(suite, runs_dir, pending: tuple[int, ...] = ()) -> int:
    """Print the claim's table over ``suite.seeds`` (``pending``: the seeds left out, unfinished), with
    the runs it uses whose scenario differs from the suite's named in it."""
    from analysis.claims import arm_scenarios, claim_table, read_runs, run_states, stale_notes
    try:
        scenarios = arm_scenarios(suite)
        notes = stale_notes(scenarios, run_states(suite, scenarios, runs_dir))
        table, _ = claim_table(suite, read_runs(suite, runs_dir), runs_dir, pending, notes)
    except (ValueError, OSError, ScenarioError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print(table, end="")
    return 0


def partition_line(heterogeneity: dict[str, float]) -> str:
    """A partition's heterogeneity (:meth:`simulator.data.partition.Partition.heterogeneity`) in words."""
    line = (f"{heterogeneity['client_size_min']} to {heterogeneity['client_size_max']} images a client, "
            f"{heterogeneity['classes_per_client']:.2f} classes on average "
            f"({heterogeneity['classes_per_client_1pct']:.2f} with at least 1% of its images), its largest "
            f"class {heterogeneity['largest_class_share']:.0%} of them; class sets: "
            f"{heterogeneity['distinct_class_sets']} distinct")
    if "rotation_bins_per_client" in heterogeneity:
        line += (f"; rotations in {heterogeneity['rotation_bins_per_client']:.2f} of "
                 f"{heterogeneity['rotation_bins']} bins on average")
    return line


def check_before_running(scenario: dict, source: str) -> dict[str, float]:
    """Fail early if the data or the partition cannot be had (DatasetUnavailable; ScenarioError
    under ``partition``), if a method setting does not fit the data (ScenarioError under
    ``method.KEY``, e.g. Hetero-SSFL's RAD larger than the test images left to it), or if the run's
    own Ray instance could never place its worker actors (ScenarioError under ``ray.num_workers``,
    ``ray.worker.num_gpus`` or ``ray.worker_pools``; :func:`simulator.engine.own_instance_room`).
    Returns the partition's heterogeneity (:meth:`simulator.data.partition.Partition.heterogeneity`)."""
    from methods import METHODS
    from methods.base import ParamError
    from simulator.data.partition import ClientCountError
    from simulator.data.store import PartitionReader, prepare_partition
    from simulator.held_out import HeldOutImages
    from simulator.runlog import check_directory_path
    if scenario["executor"] == "ray":  # an in-process run never imports Ray
        from simulator.engine import own_instance_room, unreachable_address
        if (unreachable := unreachable_address(scenario)) is not None:
            raise ScenarioError(source, "ray.address", unreachable)
        if (no_room := own_instance_room(scenario)) is not None:
            raise ScenarioError(source, *no_room)
    try:
        method = METHODS[scenario["method"]["name"]]
        method.check_data(method.Params.from_config(scenario["method"]), HeldOutImages.of(scenario))
    except ParamError as err:
        raise ScenarioError(source, f"method.{err.key}", err.message) from None
    for key, path in (("output.dir", scenario["output"]["dir"]),
                      ("dataset.cache_dir", scenario["dataset"]["cache_dir"])):
        try:
            check_directory_path(Path(path).expanduser(), key)
        except FileExistsError as err:
            raise ScenarioError(source, key, str(err)) from None
    try:
        partition_dir = prepare_partition(scenario)
    except ValueError as err:  # raised by partitioners for impossible settings
        key = "population.num_clients" if isinstance(err, ClientCountError) else "partition"
        raise ScenarioError(source, key, str(err)) from None
    reader = PartitionReader(partition_dir)
    sizes = reader.sizes
    check_network_size(scenario, source, partition_dir)
    training = scenario["training"]
    if training["drop_last"] and training["batch_size"] > sizes.max():
        raise ScenarioError(source, "training.batch_size",
                            f"expected at most {sizes.max()} (the largest client's samples) with training.drop_last, "
                            f"which skips incomplete batches: no client would take a step; "
                            f"got {training['batch_size']}")
    return reader.heterogeneity


def check_checkpoint_fits_scenario(scenario: dict, checkpoint: Path) -> None:
    """Raise ``ScenarioError`` where ``checkpoint`` cannot be read, or its state does not fit the networks
    ``scenario`` (the run's) describes (:func:`simulator.run.check_checkpoint_fits`): for
    ``fedssl run --resume`` and a claim's interrupted runs, before anything starts."""
    from methods import build_method
    from simulator.data.store import prepare_partition
    from simulator.run import check_checkpoint_fits, data_spec
    from simulator.runlog import read_checkpoint
    saved = read_checkpoint(checkpoint)
    method = build_method(scenario, data_spec(prepare_partition(scenario), scenario))
    check_checkpoint_fits(method.init_state(), saved, checkpoint)


def check_network_size(scenario: dict, source: str, partition_dir) -> None:
    """Fail early (ScenarioError under ``model``) when the networks' weights alone would not fit in
    this machine's memory (widths such as ``model.hidden_dim: 100000000000``), which torch would
    otherwise report as its allocator's traceback once the run has started; counted on the meta
    device (:func:`simulator.resources.workspace_state_bytes`)."""
    from methods import build_method
    from simulator.resources import machine_memory_bytes, workspace_state_bytes
    from simulator.run import data_spec
    memory = machine_memory_bytes()
    widths = "expected smaller widths (model.encoder, model.hidden_dim, model.projector_dim)"
    try:
        needed = workspace_state_bytes(build_method(scenario, data_spec(Path(partition_dir), scenario)))
    except (TypeError, OverflowError, RuntimeError) as err:  # a width past torch's 64-bit sizes
        raise ScenarioError(source, "model", f"torch cannot make tensors of these widths ({type(err).__name__}); "
                                             f"{widths}") from None
    if memory is not None and needed > memory:
        raise ScenarioError(source, "model", f"the networks' weights alone take {needed / 2**30:,.1f} GiB, more than "
                                             f"this machine's {memory / 2**30:,.1f} GiB of memory; {widths}")


def main(argv: list[str] | None = None) -> int:
    commands = parser()
    args = commands.parse_args(argv)
    if args.command == "run" and (args.resume is None) == (args.scenario is None):
        commands.commands["run"].error("expected a scenario file or --resume RUN_DIR (one of them)")
    if args.command == "report" and args.metrics and not args.plot:
        commands.commands["report"].error("--metric names a curve of --plot DIR; expected --plot with it")
    if args.command == "claim" and args.no_run:  # they did nothing with --no-run
        if args.until is not None:
            commands.commands["claim"].error("--until stops the suite's runs, which --no-run does not start; "
                                             "expected one of them")
        if args.progress:
            commands.commands["claim"].error("--progress shows the suite's runs, which --no-run does not start; "
                                             "expected one of them")
    if args.command == "report":
        return report(args.runs, args.baseline, plot=args.plot, metrics=args.metrics, margins=args.margins)
    if args.command == "evaluate":
        return report(args.runs, args.baseline, args.overrides, margins=args.margins)
    from simulator.data.datasets import DatasetUnavailable
    if args.command in ("sweep", "benchmark"):
        return study(args)
    if args.command == "claim":
        return claim(args)
    if args.command == "ledger":
        return ledger(args)
    if args.command == "claims":
        return claims(args)
    if args.command == "diff":
        return diff(args)
    try:
        if args.command == "run" and args.resume:
            args.scenario = resumable(args.resume, args.overrides, args.out)
        scenario = load_scenario(args.scenario, args.overrides)
        if args.command == "run" and args.out:
            from simulator.runlog import check_out
            check_out(args.out)
        try:
            partition = check_before_running(scenario, args.scenario)
        except ScenarioError as err:
            raise named_as_set(err, args.overrides) from None
        if args.command == "validate":
            print(f"{args.scenario}: ok ({scenario['method']['name']}, "
                  f"{scenario['population']['num_clients']} clients, {scenario['dataset']['name']}): "
                  f"{partition_line(partition)}")
            return 0
        from simulator.federation import RunFailure
        from simulator.run import RunStopped, ray_connection_of_the_command, run_scenario, stop_signals
        try:
            with stop_signals(), ray_connection_of_the_command():
                run_dir, summary = run_scenario(scenario, args.out, progress=not args.quiet, resume_dir=args.resume)
        except (RunStopped, KeyboardInterrupt) as err:
            return stopped(err)
        except RunFailure as err:
            return failed(err, f"resume it with: fedssl run --resume {err.run_dir}"
                          if err.resumable and err.last_checkpoint else None)
    except (ScenarioError, DatasetUnavailable, FileExistsError) as err:
        print(f"fedssl: error: {err}", file=sys.stderr)
        return 2
    print(f"run directory: {run_dir}")
    print(json.dumps({k: summary[k] for k in ("initial", "final", "rounds_completed", "wall_seconds")}))
    return 0


def command() -> None:
    """The ``fedssl`` executable: :func:`main`, the exit handlers (Ray's stops its processes), then
    the end of the process without the interpreter's teardown of torch's and Ray's modules (0.8 to
    2.7 s on 2 cores). Every file a command writes is closed before ``main`` returns."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    command()
