"""The driver of one run (``simulator.run``): the summary's figures from the logged rows, the rounds'
evaluations, a resumed run's times and TensorBoard steps, a resume that starts over, and the heal of a
lost parameter server; in-process (bitwise the Ray run: tests/simulator/test_inprocess.py)."""
import contextlib
import io
import re
import shutil

import pytest
import torch

from analysis.run_diff import logged_values
from simulator.federation import ServerFailure, ServerLost, WorkerFailure
from simulator.inprocess import InProcessFederation
from simulator.run import headline_tags, run_scenario, traffic_and_speed
from simulator.scenario import resolve
from tests.conftest import tiny_scenario
from tests.simulator.test_faults import metrics_without_timing
from tests.simulator.test_inprocess import METHODS


def test_bytes_per_round_are_of_the_training_rounds_and_the_totals_of_every_round():
    # a setup round 0 in which every client shares (as FedSC's and Orchestra's), then rounds 1-2
    rows = [(0, "bytes_up/records", 1000.0, 0.0), (0, "bytes_down/weights", 5000.0, 0.0),
            (0, "time/round_seconds", 9.0, 0.0),
            (1, "bytes_up/weights", 100.0, 0.0), (1, "bytes_down/weights", 300.0, 0.0),
            (1, "time/round_seconds", 4.0, 0.0), (1, "train/samples", 40.0, 0.0),
            (1, "memory/driver_rss_mb", 700.0, 0.0),
            (2, "bytes_up/weights", 200.0, 0.0), (2, "bytes_down/weights", 400.0, 0.0),
            (2, "time/round_seconds", 2.0, 0.0), (2, "train/samples", 60.0, 0.0),
            (2, "memory/driver_rss_mb", 650.0, 0.0)]
    figures = traffic_and_speed(rows)
    assert figures["bytes_up"] == 1300.0 and figures["bytes_down"] == 5700.0
    assert figures["bytes_per_round"] == pytest.approx((100 + 300 + 200 + 400) / 2)
    # steady state: round 2 only (round 1 pays the start-up)
    assert figures["steady_seconds_per_round"] == 2.0 and figures["steady_samples_per_second"] == 30.0
    assert figures["driver_rss_mb_max"] == 700.0


def test_a_run_of_one_training_round_has_no_steady_state_figures():
    """Round 1 pays the start-up: with no round after it there is no steady pace to give (None, not 0)."""
    figures = traffic_and_speed([(1, "time/round_seconds", 4.0, 0.0), (1, "train/samples", 40.0, 0.0)])
    assert figures["steady_seconds_per_round"] is None and figures["steady_samples_per_second"] is None


def test_the_headline_metrics_are_both_evaluations_at_every_label_fraction_and_the_loss():
    assert headline_tags({"eval": {"label_fractions": [0.01, 0.1]}}) == [
        "eval/linear_top1", "eval/knn_top1", "eval/linear_top1_1pct", "eval/knn_top1_1pct",
        "eval/linear_top1_10pct", "eval/knn_top1_10pct", "train/loss"]


def in_process(raw: dict, **sections) -> dict:
    """``raw`` resolved on the in-process executor, each of ``sections`` updated."""
    return resolve({**raw, "executor": "in_process",
                    **{name: {**raw.get(name, {}), **values} for name, values in sections.items()}})


def after_each_round(monkeypatch, hook) -> None:
    """Each in-process round, then ``hook(ctx, metrics)``, which may add metrics or raise."""
    run_round = InProcessFederation.run_round

    def hooked(self, ctx):
        metrics = run_round(self, ctx)
        hook(ctx, metrics)
        return metrics
    monkeypatch.setattr(InProcessFederation, "run_round", hooked)


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """(summary, logged values, stderr lines) of a run of 3 rounds evaluated every 2 (so rounds 0, 2 and
    3, the last), with progress lines, whose method reports ``summary/probe``: the round, each round."""
    tmp_path = tmp_path_factory.mktemp("evaluated")
    scenario = in_process(tiny_scenario(tmp_path), training={"rounds": 3}, eval={"every": 2})
    stderr = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, contextlib.redirect_stderr(stderr):
        after_each_round(monkeypatch, lambda ctx, metrics: metrics.update({"summary/probe": float(ctx.round)}))
        run_dir, summary = run_scenario(scenario, str(tmp_path / "run"), progress=True)
    return summary, logged_values(run_dir), stderr.getvalue().splitlines()


def test_a_run_is_evaluated_every_eval_every_rounds_and_at_its_last(evaluated_run):
    summary, logged, _ = evaluated_run
    assert sorted(r for r, name in logged if name == "eval/knn_top1") == [0, 2, 3]
    for key in ("knn_top1", "linear_top1"):
        assert summary["initial"][key] == logged[(0, f"eval/{key}")]
        assert summary["final"][key] == logged[(3, f"eval/{key}")]


def test_a_methods_summary_metric_lands_in_the_summary_with_its_newest_value(evaluated_run):
    assert evaluated_run[0]["probe"] == 3.0


def test_the_summary_says_how_heterogeneous_the_runs_partition_is(evaluated_run, tmp_path):
    """The tiny scenario's Dirichlet(0.5) split of the synthetic train set, counted again here."""
    from simulator.data.datasets import scenario_dataset
    from simulator.data.partition import build_partition
    scenario = resolve(tiny_scenario(tmp_path))
    labels = scenario_dataset(scenario["dataset"], scenario["seed"]).train_y.numpy()
    expected = build_partition(scenario, labels).heterogeneity(labels)
    assert evaluated_run[0]["partition"] == expected and 1 < expected["classes_per_client"] < 10


def test_each_progress_line_shows_the_newest_evaluation_and_names_its_round_when_earlier(evaluated_run):
    _, logged, lines = evaluated_run
    rounds = [line for line in lines if line.startswith("round ")]

    def shown(r):
        return f"knn {100 * logged[(r, 'eval/knn_top1')]:.2f}%  linear {100 * logged[(r, 'eval/linear_top1')]:.2f}%"
    assert [line.split("  ")[0] for line in rounds] == ["round 1/3", "round 2/3", "round 3/3"]
    assert rounds[0].endswith(f"{shown(0)} (round 0)")
    assert rounds[1].endswith(shown(2)) and rounds[2].endswith(shown(3))


def test_a_setup_round_is_not_checkpointed_and_the_last_round_is(synthetic_raw, tmp_path):
    """Checkpoints come every ``output.checkpoint_every`` training rounds (from round 1) and at the end."""
    scenario = in_process(synthetic_raw, method=METHODS["fedsc"]["method"], eval={"enabled": False},
                          output={"checkpoint_every": 10})
    run_dir, _ = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    assert min(r for r, _ in logged_values(run_dir)) == 0  # FedSC's setup round, every client
    assert [path.name for path in (run_dir / "checkpoints").iterdir()] == ["round_00002"]


def cut_after_round_4(run_dir) -> None:
    """``run_dir`` (4 rounds, a checkpoint every 2) as if its driver was killed after round 4's
    checkpoint began, before the summary: its newest checkpoint is round 2's."""
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints" / "round_00004")


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """(run directory, summary) of a run of 4 rounds cut after round 4, whose round-2 checkpoint says its
    first session took 1000 s (7.5 s to the end of round 1, 12.5 s from the launch), resumed."""
    tmp_path = tmp_path_factory.mktemp("resumed")
    scenario = in_process(tiny_scenario(tmp_path), training={"rounds": 4}, eval={"enabled": False},
                          output={"checkpoint_every": 2})
    run_dir, _ = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    cut_after_round_4(run_dir)
    state = run_dir / "checkpoints" / "round_00002" / "state.pt"
    payload = torch.load(state, weights_only=False)
    torch.save({**payload, "elapsed": 1000.0, "time_to_round1": 7.5, "launch_to_round1": 12.5}, state)
    return run_scenario(scenario, progress=False, resume_dir=str(run_dir))


def test_a_resumed_run_counts_its_first_sessions_time_and_keeps_its_start_up_times(resumed_run):
    _, summary = resumed_run
    assert summary["wall_seconds"] > 1000.0
    assert summary["seconds_to_end_of_round_1"] == 7.5 and summary["seconds_from_launch_to_end_of_round_1"] == 12.5


def test_a_resumed_runs_progress_lines_count_its_first_sessions_time(tmp_path, capsys):
    """The resumed session's round lines show the run's elapsed time, its first session's 1000 s included."""
    scenario = in_process(tiny_scenario(tmp_path), training={"rounds": 4}, eval={"enabled": False},
                          output={"checkpoint_every": 2})
    run_dir, _ = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    cut_after_round_4(run_dir)
    state = run_dir / "checkpoints" / "round_00002" / "state.pt"
    torch.save({**torch.load(state, weights_only=False), "elapsed": 1000.0}, state)
    capsys.readouterr()
    run_scenario(scenario, progress=True, resume_dir=str(run_dir))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("round ")]
    assert [line.split("  ")[0] for line in lines] == ["round 3/4", "round 4/4"]
    elapsed = [re.search(r"elapsed (\d+)m(\d\d)s", line).groups() for line in lines]
    assert all(1000 <= 60 * int(m) + int(s) < 1600 for m, s in elapsed), lines


def tensorboard_steps(run_dir, tag: str) -> list[int]:
    """The steps of ``tag`` as TensorBoard reads them from the run's event files (purges included)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


def test_a_resumed_run_leaves_each_round_once_in_its_tensorboard_events(resumed_run):
    """The first session's events of rounds 3 and 4 (after the checkpoint) are purged, not shown twice."""
    assert tensorboard_steps(resumed_run[0], "train/loss") == [1, 2, 3, 4]


def killed_before_its_first_checkpoint(scenario: dict, run_dir) -> None:
    """A finished run of ``scenario`` in ``run_dir`` made to look killed before its first checkpoint."""
    run_scenario(scenario, str(run_dir), progress=False)
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints")


def test_a_resume_that_starts_over_leaves_none_of_the_first_sessions_files_even_where_it_fails(
        synthetic_raw, tmp_path, monkeypatch):
    """A run killed before its first checkpoint is started over: its metrics, TensorBoard events and
    client states go at once, not when the new session first writes its own (here it never does)."""
    scenario = in_process(synthetic_raw, method={"name": "fedema", "objective": "byol"}, eval={"enabled": False})
    run_dir = tmp_path / "run"
    killed_before_its_first_checkpoint(scenario, run_dir)
    first_events = set((run_dir / "tensorboard").iterdir())
    assert first_events and (run_dir / "metrics.parquet").exists()

    def failing(self, ctx):
        raise WorkerFailure(f"round {ctx.round}, client 0, fedema: non-finite loss (nan)")
    monkeypatch.setattr(InProcessFederation, "run_round", failing)
    with pytest.raises(WorkerFailure) as failed:
        run_scenario(scenario, progress=False, resume_dir=str(run_dir))
    assert failed.value.last_checkpoint is None
    assert not (run_dir / "metrics.parquet").exists()
    assert not set((run_dir / "tensorboard").iterdir()) & first_events  # only the new session's header
    assert not list((run_dir / "client_state").glob("client_*.pt"))


def test_a_resume_that_starts_over_times_its_own_start_up(synthetic_raw, tmp_path, monkeypatch):
    """Round 1 is played again in the resumed session, which counts none of the first one's time."""
    from simulator.run import RunLoop
    scenario = in_process(synthetic_raw, eval={"enabled": False})
    killed_before_its_first_checkpoint(scenario, tmp_path / "run")
    monkeypatch.setattr(RunLoop, "runs_in_this_process", 0)  # the resuming command's first run
    _, summary = run_scenario(scenario, progress=False, resume_dir=str(tmp_path / "run"))
    assert summary["seconds_from_launch_to_end_of_round_1"] > summary["seconds_to_end_of_round_1"] > 0


def server_lost_after(monkeypatch, *rounds: int) -> None:
    """The in-process parameter server is lost at the end of round ``r`` for each ``r`` of ``rounds``
    (a round given twice: in the round played again too), its states already in the client-state store."""
    deaths = list(rounds)

    def lost(ctx, metrics):
        if ctx.round in deaths:
            deaths.remove(ctx.round)
            raise ServerLost(f"round {ctx.round}: the parameter server died")
    after_each_round(monkeypatch, lost)


def healing(raw: dict) -> dict:
    """FedEMA (stateful clients) for 4 rounds, evaluated and checkpointed every 2."""
    return in_process(raw, method={"name": "fedema", "objective": "byol"}, training={"rounds": 4},
                      eval={"every": 2}, output={"checkpoint_every": 2})


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory):
    """(scenario, run directory, summary) of the fault-free run of :func:`healing`."""
    tmp_path = tmp_path_factory.mktemp("fault-free")
    scenario = healing(tiny_scenario(tmp_path))
    return (scenario, *run_scenario(scenario, str(tmp_path / "run"), progress=False))


# before the first checkpoint (from the start), after it, and a round later (round 3's first events then
# in TensorBoard already: purged from the checkpoint's next round on, not shown twice)
@pytest.mark.parametrize("lost_in_round", [1, 3, 4])
def test_a_lost_server_heals_from_the_newest_checkpoint_to_the_fault_free_run(fault_free, tmp_path, monkeypatch,
                                                                            lost_in_round):
    """A new server, the client-state store and the logs rewound to the round-2 checkpoint (or to
    the start, without one: the store emptied, the round-0 networks evaluated again), the rounds since
    played again: every logged value, evaluation, client state and TensorBoard step as without fault."""
    scenario, reference_dir, reference = fault_free
    server_lost_after(monkeypatch, lost_in_round)
    healed_dir, healed = run_scenario(scenario, str(tmp_path / "healed"), progress=False)
    assert (reference["server_restarts"], healed["server_restarts"]) == (0, 1)
    assert healed["initial"] == reference["initial"] and healed["final"] == reference["final"]
    assert healed["pixels"] == reference["pixels"]
    assert metrics_without_timing(healed_dir) == metrics_without_timing(reference_dir)
    assert tensorboard_steps(healed_dir, "train/loss") == [1, 2, 3, 4]
    clients = sorted(path.name for path in (reference_dir / "client_state").glob("client_*.pt"))
    assert clients and sorted(path.name for path in (healed_dir / "client_state").glob("client_*.pt")) == clients
    for name in clients:
        assert (healed_dir / "client_state" / name).read_bytes() == (reference_dir / "client_state" / name).read_bytes()


class EvaluatedARoundLater(InProcessFederation):
    """The in-process federation with evaluations that are ready once the next round has begun, as
    the Ray engine's evaluator thread or actor may be: they stay pending across a round."""

    rounds_begun = 0

    def run_round(self, ctx):
        self.rounds_begun += 1
        return super().run_round(ctx)

    def submit_eval(self, networks=None):
        return self.rounds_begun, super().submit_eval(networks)

    def ready(self, evaluation) -> bool:
        return self.rounds_begun > evaluation[0]

    @staticmethod
    def result(evaluation):
        return evaluation[1]


def test_a_heal_drops_the_evaluations_still_pending_from_before_it(synthetic_raw, tmp_path, monkeypatch):
    """Round 2's evaluation is still pending when the server is lost in round 3 (no checkpoint yet):
    the rounds played again evaluate it again, and it is logged once, as without fault."""
    import simulator.run
    monkeypatch.setattr(simulator.run, "start_federation", EvaluatedARoundLater)
    scenario = in_process(synthetic_raw, training={"rounds": 4}, output={"checkpoint_every": 10})
    reference_dir, reference = run_scenario(scenario, str(tmp_path / "reference"), progress=False)
    server_lost_after(monkeypatch, 3)
    healed_dir, healed = run_scenario(scenario, str(tmp_path / "healed"), progress=False)
    assert healed["server_restarts"] == 1 and healed["final"] == reference["final"]
    assert metrics_without_timing(healed_dir) == metrics_without_timing(reference_dir)


def test_a_server_that_keeps_dying_fails_the_run_after_three_restarts(synthetic_raw, tmp_path, monkeypatch):
    scenario = in_process(synthetic_raw, training={"rounds": 4}, eval={"enabled": False},
                          output={"checkpoint_every": 2})
    server_lost_after(monkeypatch, 3, 3, 3, 3)
    with pytest.raises(ServerFailure) as failed:
        run_scenario(scenario, str(tmp_path / "run"), progress=False)
    assert str(failed.value) == "round 3: the parameter server died; it kept dying (3 restarts)"
    assert failed.value.last_checkpoint == str(tmp_path / "run" / "checkpoints" / "round_00002")


def test_a_note_only_where_one_pools_clients_were_simulated_with_different_numerics():
    from simulator.run import mixed_pools_note
    # pools that each compute one way (a GPU tier beside a CPU one) repeat bitwise whatever the placement
    assert mixed_pools_note({"large": {"GPU H200"}, "small": {"CPU AVX2"}, "idle": set()}) is None
    mixed = {"large": {"GPU H200"}, "small": {"CPU AVX512", "CPU AVX2"}, "tiny": {"CPU AVX2", "CPU X"}}
    assert mixed_pools_note(mixed) == (
        "the clients of a worker pool were simulated with different numerics (small: CPU AVX2; CPU AVX512 / "
        "tiny: CPU AVX2; CPU X), so the results depend on which process simulated which client (the number of "
        "workers, where Ray placed them), and another run need not repeat them bitwise (README, \"On a Ray cluster\")")
