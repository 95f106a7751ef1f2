"""Evaluate a finished (or interrupted) run again under another evaluation protocol, in-process.

``fedssl evaluate RUN_DIR... --set eval.KEY=VALUE`` rebuilds the run's round-0 networks from its
seed and its newest checkpoint's networks, and evaluates both with the run's scenario whose ``eval``
section the overrides change (e.g. ``eval.train_subset=null`` for the whole training set as the kNN
bank and probe set). Nothing is written into the run directory. With no override the numbers are
those the run itself logged: evaluation is single-threaded there and here.
"""
from __future__ import annotations

from pathlib import Path

from simulator.evaluation.monitor import EvaluationCache, load_eval_data, raw_pixels, summarize_evaluations
from analysis.report import group_means
from methods import METHODS, build_method
from simulator.federation import Server
from simulator.resources import threads
from simulator.data.store import prepare_partition
from simulator.held_out import HeldOutImages
from simulator.run import check_checkpoint_fits, data_spec
from simulator.runlog import (check_run_dir, latest_checkpoint, load_recorded_scenario, read_checkpoint,
                              read_client_state)


# eval keys that say when a run evaluates: evaluate evaluates the newest checkpoint whatever they say
WHEN_A_RUN_EVALUATES = ("eval.enabled", "eval.every")


def evaluation_overrides(overrides: list[str]) -> list[str]:
    """The overrides, if each changes an ``eval.`` key that evaluating a checkpoint reads; raises
    ValueError otherwise."""
    for item in overrides:
        if not item.startswith("eval."):
            raise ValueError(f"--set {item}: only eval.* keys can change when evaluating a finished run")
        if item.partition("=")[0] in WHEN_A_RUN_EVALUATES:
            raise ValueError(f"--set {item}: it says when a run evaluates, which changes nothing here (evaluate "
                             f"evaluates the newest checkpoint); expected an eval.* key of how it evaluates")
    return overrides


def check_tests_no_trained_image(run_dir: Path, recorded: dict, scenario: dict) -> None:
    """Raises ValueError where ``scenario``'s (changed) test subset would test on held-out images the
    run's clients trained on (Hetero-SSFL's RAD lies outside the run's own ``eval.test_subset``)."""
    method = METHODS[recorded["method"]["name"]]
    trained_on = method.held_out_images(method.Params.from_config(recorded["method"]))
    if trained_on == 0 or scenario["eval"]["test_subset"] == recorded["eval"]["test_subset"]:
        return
    tested = HeldOutImages.of(recorded).tested_among_first(trained_on, HeldOutImages.of(scenario))
    if tested:
        shown = lambda value: "null" if value is None else value
        raise ValueError(f"{run_dir}: --set eval.test_subset={shown(scenario['eval']['test_subset'])} would test on "
                         f"{tested} of the {trained_on} held-out images its clients trained on (outside its "
                         f"eval.test_subset={shown(recorded['eval']['test_subset'])}); expected a test subset without "
                         f"them (the run's own, or a smaller one)")


def evaluate_run(run_dir: Path, overrides: list[str] = (), cache: EvaluationCache | None = None) -> dict:
    """The run's initial (round 0) and final (newest checkpoint) metrics and its raw-pixel reference
    (``pixels``, where ``eval.pixel_reference``) under the changed protocol,
    as :func:`analysis.report.read_run` gives them (``rounds_completed``: the checkpoint's round,
    ``wall_seconds``: the run's time up to it). Raises ValueError for a directory with no checkpoint.
    ``cache``: evaluations shared across the runs of one command (the same pixels and round-0 networks)."""
    cache = cache if cache is not None else EvaluationCache()
    check_run_dir(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None and (run_dir / "summary.json").exists():  # a kept run: results/runs/ keeps no checkpoints
        raise ValueError(f"{run_dir}: no checkpoint to evaluate: the run finished (summary.json) but its checkpoints "
                         f"are not in its directory (a kept run's are not); its raw-pixel reference needs none "
                         f"(scripts/pixel_reference.py)")
    if checkpoint is None:
        raise ValueError(f"{run_dir}: no checkpoint to evaluate (the run stopped before its first)")
    scenario = load_recorded_scenario(run_dir, evaluation_overrides(list(overrides)))
    check_tests_no_trained_image(run_dir, load_recorded_scenario(run_dir), scenario)
    saved = read_checkpoint(checkpoint)
    server = Server(build_method(scenario, data_spec(prepare_partition(scenario), scenario)))
    check_checkpoint_fits(server.state, saved, checkpoint)

    def load_client_state(cid: int):
        return read_client_state(checkpoint, cid)

    with threads(1):  # as the run's evaluator, so that unchanged settings give its numbers
        data = load_eval_data(scenario)
        evaluate = lambda networks: summarize_evaluations(cache.evaluate_networks(networks, data, scenario))
        pixels = evaluate(raw_pixels())[0] if scenario["eval"]["pixel_reference"] else None
        initial, _ = evaluate(server.eval_networks(lambda cid: None))
        server.state = saved["state"]
        final, logged = evaluate(server.eval_networks(load_client_state))
    return {"dir": str(run_dir), "name": scenario["name"], "seed": scenario["seed"], "initial": initial,
            "final": final, "pixels": pixels, "rounds_completed": saved["round"], "wall_seconds": saved["elapsed"],
            "groups": group_means(logged),
            # the training's provenance, as report shows it (the checkpoint records both)
            **{key: saved[key] for key in ("numerics", "code") if saved.get(key)}}

