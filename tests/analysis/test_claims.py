"""Claim suites: the suite file, the verdict on hand-made numbers, and ``fedssl claim`` end to end
(runs once, never repeats a finished run, resumes an interrupted one)."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from analysis.claims import decide, overall, read_suite
from analysis.claims_index import INDEX, left_out_arms, report_sources
from simulator.cli import main
from simulator.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]


# ---- the verdict ---------------------------------------------------------------------------

@pytest.mark.parametrize("interval, direction, margin, verdict", [
    ((0.52, 5.48), "greater", None, "reproduced"),            # excludes zero, above
    ((-3.57, 9.57), "greater", None, "not reproduced"),       # includes zero
    ((-5.48, -0.52), "greater", None, "contradicted"),        # excludes zero, below
    (None, "greater", None, "not reproduced"),                # one seed: no interval
    ((-0.43, 0.43), "equivalent", 1.0, "reproduced"),         # inside ±1
    ((0.52, 5.48), "equivalent", 1.0, "not reproduced"),      # straddles +1
    ((-1.2, 0.3), "equivalent", 1.0, "not reproduced"),       # straddles -1
    ((1.5, 3.0), "equivalent", 1.0, "contradicted"),          # wholly outside
    ((-3.0, 0.5), "not_greater", 1.0, "reproduced"),          # below +1 (UV hurts or does not help)
    ((-0.4, 1.4), "not_greater", 1.0, "not reproduced"),      # may help by more than 1
    ((1.2, 2.0), "not_greater", 1.0, "contradicted"),         # helps by more than 1
    ((0.5, 1.5), "not_greater", 1.0, "not reproduced"),       # above zero, yet may stay below +1
    ((-3.0, -1.5), "equivalent", 1.0, "contradicted"),        # wholly below -1
    ((0.0, 2.0), "greater", None, "not reproduced"),          # touches zero: does not exclude it
    ((-2.0, 0.0), "greater", None, "not reproduced"),
    ((-1.0, 0.5), "equivalent", 1.0, "not reproduced"),       # touches -1: not inside
    ((-0.5, 1.0), "not_greater", 1.0, "not reproduced"),      # touches +1
    ((1.0, 2.0), "not_greater", 1.0, "not reproduced"),       # from +1 up: not wholly above it
    ((-0.5, 1.0), "equivalent", 1.0, "not reproduced"),       # touches +1: not inside
    ((1.0, 2.0), "equivalent", 1.0, "not reproduced"),        # from +1 up: not wholly outside
    ((-2.0, -1.0), "equivalent", 1.0, "not reproduced"),      # up to -1: not wholly outside
])
def test_verdict_from_the_interval(interval, direction, margin, verdict):
    assert decide(interval, direction, margin)[0] == verdict


def test_a_claim_of_several_comparisons_needs_every_one():
    assert overall(["reproduced", "reproduced"]) == "reproduced"
    assert overall(["reproduced", "not reproduced"]) == "not reproduced"
    assert overall(["not reproduced", "contradicted"]) == "contradicted"


# ---- suites over fake finished runs: the table ------------------------------------------------

def write_yaml(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fake_suite(tmp_path, synthetic_raw, comparisons, finals, knn_finals=None, numerics=None):
    """A suite of arms over the tiny scenario whose runs are already finished, with the given final
    linear-probe accuracies per arm and seed (round 0: 0.50 everywhere; kNN: round 0 0.40, final
    ``knn_finals`` or linear - 0.1; raw pixels: probe 0.60, kNN 0.45; ``numerics``: per arm and seed the summary's ``numerics``, none
    recorded where absent)."""
    scenario_file = write_yaml(tmp_path / "tiny.yaml", synthetic_raw)
    lrs = {"a": 0.05, "b": 0.01, "c": 0.02, "d": 0.03}
    suite = {"claim": "a beats b", "paper": "Nobody et al., Table 1", "seeds": [0, 1, 2],
             "primary": "linear_top1", "secondary": ["knn_top1"],
             "arms": {arm: {"scenario": str(scenario_file), "set": [f"training.lr={lrs[arm]}"]} for arm in finals},
             "comparisons": comparisons, "out": str(tmp_path / "runs")}
    for arm, per_seed in finals.items():
        for seed, final in enumerate(per_seed):
            run_dir = tmp_path / "runs" / arm / f"seed_{seed}"
            write_yaml(run_dir / "scenario.yaml", load_scenario(scenario_file, [f"training.lr={lrs[arm]}",
                                                                                f"seed={seed}"]))
            (run_dir / "summary.json").write_text(json.dumps({
                "initial": {"linear_top1": 0.50, "knn_top1": 0.40},
                "final": {"linear_top1": final,
                          "knn_top1": (knn_finals or {}).get(arm, [f - 0.1 for f in per_seed])[seed]},
                "rounds_completed": 2, "pixels": {"linear_top1": 0.60, "knn_top1": 0.45},
                **({"numerics": numerics[arm][seed]} if numerics and arm in numerics else {})}))
    return write_yaml(tmp_path / "claims" / "suite.yaml", suite)


def test_table_and_verdict_on_hand_made_numbers(tmp_path, synthetic_raw, capsys):
    # a - b: +2, +3, +4 points: mean 3, std 1, standard error 1/sqrt(3), t(0.975, 2) = 4.3027: [+0.52, +5.48]
    # c - b: +1, +2, +6 points: mean 3, std sqrt(7): [-3.57, +9.57]
    # secondary kNN, a - b: 0, +5, -5 points, [-12.42, +12.42]: it would not reproduce; it decides nothing
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.61, 0.62, 0.66]}
    knn_finals = {"a": [0.50, 0.55, 0.45], "b": [0.50, 0.50, 0.50]}
    comparisons = [{"arm": "a", "baseline": "b", "direction": "greater"},
                   {"arm": "c", "baseline": "b", "direction": "greater"}]
    suite = fake_suite(tmp_path, synthetic_raw, comparisons, finals, knn_finals)
    assert main(["claim", str(suite)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "claim:" not in captured.err  # every run had finished: nothing ran
    assert "# Claim: a beats b" in out and "Paper: Nobody et al., Table 1" in out
    assert "Primary metric (decides the verdict): **linear_top1**" in out
    assert "Code of the runs (`summary.json` `code`; a resumed run names each session's): not recorded in 9 runs" in out
    assert "Numerics of the runs (`summary.json` `numerics`; runs agree bitwise only where these agree): " \
           "not recorded in 9 runs" in out
    assert "Secondary (printed, decide nothing): knn_top1" in out
    # per arm: round 0 beside final, mean ± std over the seeds, the gain over round 0 with its interval
    assert "| a | decides | " in out and "| 50.00 ± 0.00 | 63.00 ± 1.00 | 40.00 ± 0.00 | 50.00 ± 5.00 |" in out
    assert "+13.00 [+10.52, +15.48] (ahead on 3/3) |" in out
    assert "| a − b | decides | +3.00 [+0.52, +5.48] (ahead on 3/3) | +0.00 [-12.42, +12.42] (ahead on 1/3) |" in out
    assert "| c − b | decides | +3.00 [-3.57, +9.57] (ahead on 3/3) |" in out
    # every run's own gain over round 0 and whether it clears the learning margins (knn, then probe)
    assert "| arm | seed | knn_top1 final − round 0 | linear_top1 final − round 0 | learned? |" in out
    assert "| a | 2 | +5.00 | +14.00 | clears the margins |" in out
    assert "9 of 9 runs clear the learning margins" in out
    # and against the raw pixels (kNN 45, probe 60): a's seed 2 is level with them on the kNN
    assert "## Per run: round 0 and final against the raw pixels (decides nothing)" in out
    assert "| a | 2 | 45.00 | -5.00 | +0.00 | 60.00 | -10.00 | +4.00 |" in out
    assert "5 of 9 final networks are above it on knn_top1, linear_top1" in out
    assert "decided only by the primary metric, linear_top1" in out
    assert "claimed a > b: a − b = +3.00 [+0.52, +5.48] points over 3 seeds → **reproduced**" in out
    assert "claimed c > b: c − b = +3.00 [-3.57, +9.57] points over 3 seeds → **not reproduced**" in out
    assert "**Claim not reproduced** (every comparison must be reproduced)." in out
    assert "## Numerics" not in out  # no run recorded its numerics: nothing to compare


AVX2, AVX512 = "torch 2.14.1, CPU AVX2", "torch 2.14.1, CPU AVX512"


def test_runs_of_a_seed_on_different_numerics_are_named_and_the_verdict_is_unchanged(tmp_path, synthetic_raw,
                                                                                    capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    comparisons = [{"arm": "a", "baseline": "b", "direction": "greater"}]
    # seed 1: b on another instruction set; seed 2: a's run mixed two (workers on two kinds of node)
    numerics = {"a": [[AVX2], [AVX2], [AVX2, AVX512]], "b": [[AVX2], [AVX512], [AVX2, AVX512]]}
    suite = fake_suite(tmp_path, synthetic_raw, comparisons, finals, numerics=numerics)
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    section = out.split("## Numerics: runs of a seed computed differently")[1].split("## Per run")[0]
    notes = [line for line in section.splitlines() if line.startswith("- ")]
    assert notes == [f"- seed 1: a on {AVX2}; b on {AVX512}",
                     f"- seed 2, a: one run computed with {AVX2} and {AVX512}",
                     f"- seed 2, b: one run computed with {AVX2} and {AVX512}"]
    assert "points over 3 seeds → **reproduced**" in out  # a note, not a change of the verdict


def test_the_same_numerics_in_every_run_or_none_recorded_give_no_numerics_section(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    comparisons = [{"arm": "a", "baseline": "b", "direction": "greater"}]
    numerics = {"a": [[AVX512]] * 3}  # b's runs recorded none (made before the summary had the key)
    suite = fake_suite(tmp_path, synthetic_raw, comparisons, finals, numerics=numerics)
    assert main(["claim", str(suite)]) == 0
    assert "## Numerics" not in capsys.readouterr().out


def test_no_run_prints_an_interim_table_over_the_finished_seeds_without_a_verdict(tmp_path, synthetic_raw, capsys,
                                                                                   monkeypatch):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("--no-run started a run"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    assert main(["claim", str(suite), "--no-run"]) == 0
    complete = capsys.readouterr().out
    assert complete.rstrip().endswith("**Claim reproduced**.") and "Interim" not in complete

    # seed 1 of b unfinished (interrupted: its scenario, no summary): seeds 0 and 2 are shown, seed 1 is pending
    (tmp_path / "runs" / "b" / "seed_1" / "summary.json").unlink()
    assert main(["claim", str(suite), "--no-run"]) == 0
    out = capsys.readouterr().out
    assert "**Interim: seed 1 of the suite has not finished in every arm" in out
    assert "the protocol decides on all 3 seeds" in out and "seeds 0,2." in out
    # a - b on seeds 0 and 2: +2, +4: mean 3, standard error 1, t(0.975, 1) = 12.706: [-9.71, +15.71]
    assert "claimed a > b: a − b = +3.00 [-9.71, +15.71] points over 2 seeds → no verdict yet" in out
    assert out.rstrip().endswith("**No verdict yet**: 2 of 3 seeds finished.")
    assert "**Claim" not in out and "reproduced" not in out

    for seed in (0, 2):  # no seed finished in every arm
        (tmp_path / "runs" / "b" / f"seed_{seed}" / "summary.json").unlink()
    assert main(["claim", str(suite), "--no-run"]) == 0
    assert capsys.readouterr().out == (f"claim: no seed has finished in every arm yet (3 of 6 runs finished in "
                                       f"{tmp_path / 'runs'}); nothing to show\n")


def test_a_kept_run_whose_scenario_differs_from_the_suites_is_named_with_and_without_running(
        tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    stored = tmp_path / "runs" / "b" / "seed_1" / "scenario.yaml"
    record = yaml.safe_load(stored.read_text())
    del record["training"]["drop_last"], record["method"]["label_loss"]  # keys an older record lacks: no note
    write_yaml(stored, {**record, "training": {**record["training"], "lr": 0.5, "momentum": 0.0},
                        "eval": {**record["eval"], "pixel_reference": not record["eval"]["pixel_reference"]}})
    # (the raw-pixel reference changes nothing the claim measures: no note for it)
    note = (f"note: {stored.parent}: its scenario differs from the suite's at training.lr, training.momentum "
            f"(the run is used as it is)\n")
    for extra in ([], ["--no-run"]):
        assert main(["claim", str(suite), *extra]) == 0
        captured = capsys.readouterr()
        assert captured.err == note, extra
        assert "**Claim reproduced**." in captured.out
        # and in the report itself, which is what is kept
        assert f"## Runs used though their scenario differs from the suite's\n\n- {note}" in captured.out, extra


def test_report_names_a_run_whose_scenario_differs_from_the_others_of_its_name(tmp_path, capsys):
    def run(label, seed, **training):
        run_dir = tmp_path / label
        write_yaml(run_dir / "scenario.yaml", {"name": "s", "seed": seed, "model": {"encoder": "small_cnn"},
                                               "training": {"lr": 0.05, "rounds": 3, **training},
                                               "output": {"dir": str(tmp_path / label)}})  # neutral: no note
        (run_dir / "summary.json").write_text(json.dumps({
            "initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 0.7, "linear_top1": 0.8},
            "rounds_completed": 3, "wall_seconds": 1.0}))
        return str(run_dir)
    same = [run("s0", 0), run("s1", 1)]
    older = run("s2", 2)  # an older record, without drop_last (absent means false): no note
    odd = run("odd", 3, lr=0.5, rounds=5, drop_last=True)
    assert main(["report", *same, older]) == 0
    assert capsys.readouterr().err == ""
    for path in same:
        scenario = yaml.safe_load((Path(path) / "scenario.yaml").read_text())
        scenario["training"]["drop_last"] = False
        write_yaml(Path(path) / "scenario.yaml", scenario)
    assert main(["report", *same, older, odd]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"note: {odd}: its scenario differs from that of the other runs named 's' ({same[0]}, "
                            f"{same[1]}, {older}) at training.drop_last, training.lr, training.rounds; the report "
                            f"counts them as one scenario (give it another name to keep it apart)\n")
    assert "| s | 0,1,2,3 |" in captured.out  # a note, not an error: the runs are still tabulated together


def test_a_suite_of_one_seed_is_not_reproduced_and_shows_no_arm_learning(tmp_path, synthetic_raw, capsys):
    """One seed has no interval: +2 points on it is "not reproduced" (README: always with a single seed), and
    a gain over round 0 of +12 on one seed does not show that an arm learns."""
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}],
                       {"a": [0.62, 0.63, 0.64], "b": [0.60] * 3})
    write_yaml(suite, {**yaml.safe_load(suite.read_text()), "seeds": [0]})
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "| a − b | decides | +2.00 [n/a: 1 seed] (ahead on 1/1) |" in out
    assert "| +12.00 [n/a: 1 seed] (ahead on 1/1) **not shown to learn** |" in out
    assert ("- claimed a > b: a − b = +2.00 n/a points over 1 seed → **not reproduced** (one seed: no interval)\n"
            in out)
    assert "interval not above zero): a, b; the verdict is about networks that did not learn." in out
    assert out.rstrip().endswith("**Claim not reproduced**.")


def test_differences_equal_on_every_seed_are_flagged(tmp_path, synthetic_raw, capsys):
    # a - b: +2 points on each seed: standard deviation 0, an interval of no width
    finals = {"a": [0.62, 0.62, 0.62], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "→ **reproduced** (the interval lies above zero); the differences are equal on every seed" in out
    shutil.rmtree(tmp_path / "runs")  # with a spread, no such line
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}],
                       {"a": [0.62, 0.63, 0.64], "b": [0.60] * 3})
    assert main(["claim", str(suite)]) == 0
    assert "equal on every seed" not in capsys.readouterr().out
    shutil.rmtree(tmp_path / "runs")  # equivalence: the outcome rests on where the one value lies, not its sign
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "equivalent",
                                                  "margin": 1.0}], {"a": [0.60] * 3, "b": [0.60] * 3})
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "the differences are equal on every seed, so the interval has no width\n" in out and "sign" not in out
    shutil.rmtree(tmp_path / "runs")  # exactly the margin on every seed (100 * (a - b): 1 + 9e-16, 1 - 1e-14, ...)
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "not_greater",
                                                  "margin": 1.0}], {"a": [0.7121, 0.9188, 0.898],
                                                                    "b": [0.7021, 0.9088, 0.888]})
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert ("+1.00 [+1.00, +1.00] points over 3 seeds → **not reproduced** (the interval reaches beyond +1: the data "
            "cannot tell); the differences are equal on every seed, so the interval has no width\n") in out
    assert "sign" not in out  # read against the margin, not zero: the sign of the differences is not the outcome


def test_equivalence_inside_and_outside_the_margin(tmp_path, synthetic_raw, capsys):
    # a - b: +0.1, -0.2, +0.1: mean 0, standard error 0.1, [-0.43, +0.43] inside ±1
    finals = {"a": [0.601, 0.598, 0.601], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "equivalent",
                                                  "margin": 1.0}], finals)
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert ("claimed a within ±1 point of b: a − b = +0.00 [-0.43, +0.43] points over 3 seeds → **reproduced**"
            in out)
    assert out.rstrip().endswith("**Claim reproduced**.")
    # +2, +3, +4: [+0.52, +5.48] reaches beyond +1
    shutil.rmtree(tmp_path / "runs")
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "equivalent",
                                                  "margin": 1.0}], {"a": [0.62, 0.63, 0.64], "b": [0.60] * 3})
    assert main(["claim", str(suite)]) == 0
    assert "→ **not reproduced** (the interval reaches beyond ±1" in capsys.readouterr().out


def test_an_interval_end_beside_the_margin_is_printed_on_its_side_of_it(tmp_path, synthetic_raw, capsys):
    # a - b: -0.58, -0.27, 0: [-1.0043, +0.4376], beyond -1; -0.58, -0.25, 0: [-0.9993, +0.4460], inside.
    # With two decimals both low ends print as -1.00 beside opposite verdicts
    claimed = [{"arm": "a", "baseline": "b", "direction": "equivalent", "margin": 1.0}]
    for second, expected in ((0.5973, "[-1.004, +0.44] points over 3 seeds → **not reproduced**"),
                             (0.5975, "[-0.999, +0.45] points over 3 seeds → **reproduced**")):
        shutil.rmtree(tmp_path / "runs", ignore_errors=True)
        suite = fake_suite(tmp_path, synthetic_raw, claimed, {"a": [0.5942, second, 0.60], "b": [0.60] * 3})
        assert main(["claim", str(suite)]) == 0
        assert expected in capsys.readouterr().out


def test_an_interval_end_beside_the_margin_of_a_not_greater_claim_is_printed_on_its_side_of_it(
        tmp_path, synthetic_raw, capsys):
    # a - b: +0.58, +0.25, 0 points: mean 0.2767, sample std 0.29092, standard error 0.16796,
    # t(0.975, 2) = 4.302653: 0.2767 -+ 0.72268 = [-0.4460, +0.9993], below +1: reproduced. With two
    # decimals the upper end would print +1.00 beside "the interval lies below +1"; the lower end is
    # beside no boundary of this claim (zero is none), so two decimals do
    claimed = [{"arm": "a", "baseline": "b", "direction": "not_greater", "margin": 1.0}]
    suite = fake_suite(tmp_path, synthetic_raw, claimed, {"a": [0.6058, 0.6025, 0.60], "b": [0.60] * 3})
    assert main(["claim", str(suite)]) == 0
    assert ("- claimed a not better than b by 1 point or more: a − b = +0.28 [-0.45, +0.999] points over 3 seeds → "
            "**reproduced** (the interval lies below +1)\n") in capsys.readouterr().out


def test_an_arms_own_set_overrides_the_suites_shared_set(tmp_path, synthetic_raw):
    """A top-level ``set`` applies to every arm before the arm's own: an arm that sets the same key keeps
    its own value, on every seed (the seed always the suite's)."""
    from analysis.claims import arm_scenarios
    scenario_file = write_yaml(tmp_path / "tiny.yaml", synthetic_raw)
    suite = write_yaml(tmp_path / "suite.yaml", {
        "claim": "x", "seeds": [0, 1], "primary": "linear_top1", "set": ["training.lr=0.2", "training.momentum=0.5"],
        "arms": {"a": {"scenario": str(scenario_file), "set": ["training.lr=0.05"]},
                 "b": {"scenario": str(scenario_file)}},
        "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "runs")})
    scenarios = arm_scenarios(read_suite(suite))
    assert {key: (s["training"]["lr"], s["training"]["momentum"], s["seed"]) for key, s in scenarios.items()} == {
        ("a", 0): (0.05, 0.5, 0), ("a", 1): (0.05, 0.5, 1), ("b", 0): (0.2, 0.5, 0), ("b", 1): (0.2, 0.5, 1)}


def suite_with_an_interrupted_run(tmp_path, synthetic_raw, training: dict):
    """A two-arm fake suite whose run of arm b, seed 1, is interrupted (no summary) and records
    ``training`` changed from the suite's; returns the suite file and that run's directory."""
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}],
                       {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]})
    run_dir = tmp_path / "runs" / "b" / "seed_1"
    (run_dir / "summary.json").unlink()
    record = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    write_yaml(run_dir / "scenario.yaml", {**record, "training": {**record["training"], **training}})
    return suite, run_dir


def test_an_interrupted_run_whose_scenario_differs_from_the_suites_is_named_before_it_resumes(
        tmp_path, synthetic_raw, capsys, monkeypatch):
    """It resumes with its own recorded scenario: the note says so before the run goes on (and with
    --no-run, which leaves it as it is)."""
    import simulator.run
    resumed = []
    monkeypatch.setattr(simulator.run, "run_scenario", lambda scenario, *a, **k: resumed.append(k.get("resume_dir")))
    suite, run_dir = suite_with_an_interrupted_run(tmp_path, synthetic_raw, {"lr": 0.5})
    note = f"note: {run_dir}: its scenario differs from the suite's at training.lr (the run is used as it is)\n"
    assert main(["claim", str(suite), "--no-run"]) == 0
    assert capsys.readouterr().err == note
    assert main(["claim", str(suite)]) == 2  # the stand-in resumes nothing: no summary, one line
    assert resumed == [str(run_dir)]
    assert capsys.readouterr().err.startswith(note + "claim: resuming b seed 1 (1/1)")


def test_a_kept_interrupted_run_of_other_rounds_is_one_line_before_anything_runs(tmp_path, synthetic_raw, capsys,
                                                                               monkeypatch):
    """Resuming it would train to its own number of rounds and pair a run of 5 rounds with runs of 2."""
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    suite, run_dir = suite_with_an_interrupted_run(tmp_path, synthetic_raw, {"rounds": 5})
    for extra in ([], ["--no-run"]):
        assert main(["claim", str(suite), *extra]) == 2
        assert capsys.readouterr().err == (f"fedssl: error: {run_dir}: scenario.yaml: expected an interrupted run of 2 "
                                           f"rounds (the suite's), found one of 5; move it away or use another "
                                           f"--runs-dir\n")


def test_a_primary_metric_that_is_not_finite_at_round_0_is_one_line(tmp_path, synthetic_raw, capsys):
    """Round 0 is read for the arm's gain over its random network: a NaN there (the alignment of NaN
    features) is the same one line as a NaN final, not a traceback from the gain column."""
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    write_yaml(suite_file, {**suite, "primary": "align", "secondary": []})
    for arm in finals:
        for seed in (0, 1, 2):
            path = tmp_path / "runs" / arm / f"seed_{seed}" / "summary.json"
            summary = json.loads(path.read_text())
            summary["initial"]["align"] = float("nan") if (arm, seed) == ("a", 2) else 0.5
            summary["final"]["align"] = 0.4
            path.write_text(json.dumps(summary))
    assert main(["claim", str(suite_file)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {tmp_path / 'runs' / 'a' / 'seed_2'}: summary.json: expected "
                                       f"initial.align (the suite's primary metric), a finite number, got nan\n")


def test_an_arm_whose_gain_interval_reaches_zero_is_not_shown_to_learn_whatever_its_mean(tmp_path, synthetic_raw,
                                                                                         capsys):
    # round 0 probe 0.50: c gains +5, -3, +1 (mean +1, [-8.94, +10.94]); a gains +12, +13, +14
    finals = {"a": [0.62, 0.63, 0.64], "c": [0.55, 0.47, 0.51]}
    assert main(["claim", str(fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "c",
                                                                    "direction": "greater"}], finals))]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0]: line for line in out.splitlines()
            if line.startswith(("| a | decides | `", "| c | decides | `"))}  # the arms' table
    assert rows["| a"].endswith("+13.00 [+10.52, +15.48] (ahead on 3/3) |")
    assert rows["| c"].endswith("+1.00 [-8.94, +10.94] (ahead on 2/3) **not shown to learn** |")
    # the verdict says so (results/protocol.md: "the claim is reported as about networks that did not learn")
    assert ("Deciding arm not shown to learn on linear_top1 (final over round 0, interval not above zero): c; the "
            "verdict is about networks that did not learn.\n\n**Claim reproduced**.") in out
    shutil.rmtree(tmp_path / "runs")
    assert main(["claim", str(fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "c",
                                                                    "direction": "greater"}],
                                         {"a": [0.62, 0.63, 0.64], "c": [0.55, 0.56, 0.54]}))]) == 0
    assert "Deciding arm" not in capsys.readouterr().out
    shutil.rmtree(tmp_path / "runs")  # c level with its round 0 on every seed: [+0.00, +0.00] is not above zero
    assert main(["claim", str(fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "c",
                                                                    "direction": "greater"}],
                                         {"a": [0.62, 0.63, 0.64], "c": [0.50, 0.50, 0.50]}))]) == 0
    assert "interval not above zero): c; the verdict" in capsys.readouterr().out


def test_secondary_arms_and_comparisons_are_printed_and_decide_nothing(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.50, 0.40, 0.30]}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    suite["secondary_comparisons"] = [{"arm": "a", "baseline": "c"}]
    write_yaml(suite_file, suite)
    assert main(["claim", str(suite_file)]) == 0
    out = capsys.readouterr().out
    assert "| c | secondary | " in out and "**not shown to learn**" in out  # c ends below its round 0 on seed 2
    assert "| a − c | secondary, decides nothing | +23.00 [" in out
    assert "a − c = " not in out  # no verdict for it
    assert "Deciding arm" not in out  # c decides nothing: the verdict is not "about networks that did not learn"
    assert out.rstrip().endswith("**Claim reproduced**.")


def test_a_secondary_metric_the_baseline_lacks_is_n_a_and_the_claim_is_decided(tmp_path, synthetic_raw, capsys):
    """a's runs log the projector kNN (round 0 0.30, finals 0.35, 0.36, 0.37), b's do not (older code):
    b's cells and the a − b difference on it are n/a; the primary still decides."""
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    suite["secondary"] = ["knn_top1", "knn_projector_top1"]
    write_yaml(suite_file, suite)
    for seed in (0, 1, 2):
        path = tmp_path / "runs" / "a" / f"seed_{seed}" / "summary.json"
        summary = json.loads(path.read_text())
        summary["initial"]["knn_projector_top1"], summary["final"]["knn_projector_top1"] = 0.30, 0.35 + 0.01 * seed
        path.write_text(json.dumps(summary))
    assert main(["claim", str(suite_file)]) == 0
    out = capsys.readouterr().out
    # arms: probe, kNN (probe - 0.1), projector kNN, each round 0 | final
    assert ("| 50.00 ± 0.00 | 63.00 ± 1.00 | 40.00 ± 0.00 | 53.00 ± 1.00 | 30.00 ± 0.00 | 36.00 ± 1.00 "
            "| +13.00") in out
    assert "| 50.00 ± 0.00 | 60.00 ± 0.00 | 40.00 ± 0.00 | 50.00 ± 0.00 | n/a | n/a | +10.00" in out
    assert ("| a − b | decides | +3.00 [+0.52, +5.48] (ahead on 3/3) | +3.00 [+0.52, +5.48] (ahead on 3/3) "
            "| n/a |") in out
    assert out.rstrip().endswith("**Claim reproduced**.")


def test_a_nan_secondary_metric_is_n_a_and_a_nan_primary_is_one_line(tmp_path, synthetic_raw, capsys):
    """The alignment of NaN features is NaN (summary.json allows it beside finite accuracies): as a secondary
    metric its cells and differences are n/a and the primary still decides; as the primary, one line, exit 2."""
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    suite["secondary"] = ["align"]
    write_yaml(suite_file, suite)
    for arm in finals:
        for seed in (0, 1, 2):
            path = tmp_path / "runs" / arm / f"seed_{seed}" / "summary.json"
            summary = json.loads(path.read_text())
            summary["initial"]["align"] = 0.5
            summary["final"]["align"] = float("nan") if (arm, seed) == ("b", 1) else 0.4
            path.write_text(json.dumps(summary))
    assert main(["claim", str(suite_file)]) == 0
    out = capsys.readouterr().out
    assert "| 50.00 ± 0.00 | 60.00 ± 0.00 | 50.00 ± 0.00 | n/a | +10.00" in out
    assert "| a − b | decides | +3.00 [+0.52, +5.48] (ahead on 3/3) | n/a |" in out
    assert out.rstrip().endswith("**Claim reproduced**.")
    suite["primary"], suite["secondary"] = "align", []
    write_yaml(suite_file, suite)
    assert main(["claim", str(suite_file)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"fedssl: error: {tmp_path / 'runs' / 'b' / 'seed_1'}: summary.json: expected final.align "
                            f"(the suite's primary metric), a finite number, got nan\n")


def test_a_kept_run_of_other_rounds_is_one_line_and_a_count_written_as_text_is_shown_as_text(tmp_path,
                                                                                             synthetic_raw, capsys):
    """``rounds_completed: "2"`` read "expected a run of 2 rounds ..., found one of 2"."""
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}],
                            {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]})
    path = tmp_path / "runs" / "b" / "seed_1" / "summary.json"
    for done, shown in ((1, "1"), ("2", "'2'")):
        path.write_text(json.dumps({**json.loads(path.read_text()), "rounds_completed": done}))
        assert main(["claim", str(suite_file), "--no-run"]) == 2
        assert capsys.readouterr().err == (f"fedssl: error: {path.parent}: summary.json: expected a run of 2 rounds "
                                           f"(the suite's), found one of {shown}; move it away or use another "
                                           f"--runs-dir\n")


def test_arms_restricts_the_runs_and_the_table_to_the_named_arms(tmp_path, synthetic_raw, capsys, monkeypatch):
    import simulator.run
    started = []
    monkeypatch.setattr(simulator.run, "run_scenario", lambda scenario, *a, **k: started.append(scenario["seed"]))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.50, 0.40, 0.30]}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    suite["secondary_comparisons"] = [{"arm": "a", "baseline": "c"}, {"arm": "b", "baseline": "c"}]
    write_yaml(suite_file, suite)
    shutil.rmtree(tmp_path / "runs" / "c")  # the secondary arm has not run at all
    assert main(["claim", str(suite_file), "--arms", "a, b"]) == 0
    out = capsys.readouterr().out
    assert started == []  # c's three runs are not started
    assert "Arms of the suite left out (`--arms`): c." in out
    assert "| c |" not in out and " − c |" not in out
    assert "claimed a > b: a − b = +3.00 [+0.52, +5.48] points over 3 seeds → **reproduced**" in out
    assert out.rstrip().endswith("**Claim reproduced**.")
    # without --arms the same suite starts c's runs (the stand-in writes no summary: no table)
    assert main(["claim", str(suite_file)]) == 2
    assert started == [0, 1, 2]
    capsys.readouterr()

    cases = [("a,z", "--arms: expected arms of the suite (a, b, c), got 'z'"),
             ("a,c", "--arms: expected every arm of a deciding comparison among a,c (a,b)"),
             ("a,b,a", "--arms: expected each arm once, got a,b,a")]
    for arms, expected in cases:
        assert main(["claim", str(suite_file), "--arms", arms]) == 2
        err = capsys.readouterr().err
        assert err == f"fedssl: error: {suite_file}: {expected}\n", err


def test_one_pair_claimed_two_ways_gives_two_rows_told_apart(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.601, 0.598, 0.601], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "equivalent", "margin": 1},
                                                 {"arm": "a", "baseline": "b", "direction": "not_greater",
                                                  "margin": 1}], finals)
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "| a − b | decides (a within ±1 point of b) | " in out
    assert "| a − b | decides (a not better than b by 1 point or more) | " in out
    # the same pair also printed as a secondary comparison: a row of its own, told as secondary
    raw = yaml.safe_load(suite.read_text())
    write_yaml(suite, {**raw, "secondary_comparisons": [{"arm": "a", "baseline": "b"}]})
    assert main(["claim", str(suite)]) == 0
    assert "| a − b | secondary, decides nothing | " in capsys.readouterr().out


def test_a_difference_of_differences_is_paired_by_seed_and_decides(tmp_path, synthetic_raw, capsys):
    # a - b: +2, +3, +4; c - d: -1, 0, 0; so (a - b) - (c - d): +3, +3, +4: mean 10/3, std 1/sqrt(3),
    # standard error 1/3, t(0.975, 2) = 4.3027: [+1.90, +4.77]. Unpaired (the two gaps' means and standard
    # errors) it would be +3.33 +- 4.30 sqrt(1/3 + 1/9): [+0.46, +6.20]; a - b alone +3.00 [+0.52, +5.48]
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60] * 3, "c": [0.59, 0.60, 0.60], "d": [0.60] * 3}
    did = {"arm": "a", "baseline": "b", "minus": {"arm": "c", "baseline": "d"}}
    suite = fake_suite(tmp_path, synthetic_raw, [{**did, "direction": "greater"}], finals)
    raw = yaml.safe_load(suite.read_text())
    write_yaml(suite, {**raw, "secondary_comparisons": [{"arm": "c", "baseline": "d"}, did]})
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "A row (a − b) − (c − d) is a difference of differences" in out
    assert "| (a − b) − (c − d) | decides | +3.33 [+1.90, +4.77] (ahead on 3/3) | +3.33 [+1.90, +4.77] (ahead on 3/3) |" \
        in out
    assert "| c − d | secondary, decides nothing | -0.33 [-1.77, +1.10] (ahead on 0/3) |" in out
    assert "| (a − b) − (c − d) | secondary, decides nothing | +3.33 [+1.90, +4.77]" in out
    assert "- claimed a − b > c − d: (a − b) − (c − d) = +3.33 [+1.90, +4.77] points over 3 seeds → **reproduced**" \
        in out
    assert "| c | decides | " in out and "| d | decides | " in out  # the subtracted pair's arms decide too
    assert out.rstrip().endswith("**Claim reproduced**.")
    # the subtracted gap reversed: the same on seeds 0 and 1, 4 points lower on seed 2 (+3, +3, 0): not reproduced
    shutil.rmtree(tmp_path / "runs")
    suite = fake_suite(tmp_path, synthetic_raw, [{**did, "direction": "greater"}],
                       {**finals, "c": [0.59, 0.60, 0.64]})
    assert main(["claim", str(suite)]) == 0
    assert "(a − b) − (c − d) = +2.00 [-2.30, +6.30] points over 3 seeds → **not reproduced**" in capsys.readouterr().out
    # --arms must keep all four arms of a difference of differences to keep it
    assert main(["claim", str(suite), "--arms", "a,b,c"]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {suite}: --arms: expected every arm of a deciding comparison "
                                       f"among a,b,c (a,b,c,d)\n")
    # claimed within a margin: said in words of the two gaps
    suite = fake_suite(tmp_path, synthetic_raw, [{**did, "direction": "not_greater", "margin": 1}], finals)
    assert main(["claim", str(suite)]) == 0
    assert "- claimed a − b not above c − d by 1 point or more: (a − b) − (c − d) = +3.33" in capsys.readouterr().out


def test_equal_gaps_in_a_difference_of_differences_are_no_lead(tmp_path, synthetic_raw, capsys):
    """The gap a − b equals c − d on every seed (13.65, 7.19 and -8.02 points, over other baselines):
    the difference of differences is 0 on each, and no seed is one "where the first gap is the larger".
    In floating point 100 * (a - b) - 100 * (c - d) is 1.1e-14 on each, which counted as ahead on 3/3."""
    finals = {"a": [0.6711, 0.6761, 0.6114], "b": [0.5346, 0.6042, 0.6916],
              "c": [0.6507, 0.6944, 0.5911], "d": [0.5142, 0.6225, 0.6713]}
    did = {"arm": "a", "baseline": "b", "minus": {"arm": "c", "baseline": "d"}}
    suite = fake_suite(tmp_path, synthetic_raw, [{**did, "direction": "greater"}], finals)
    assert main(["claim", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "| (a − b) − (c − d) | decides | +0.00 [+0.00, +0.00] (ahead on 0/3) |" in out
    assert ("(a − b) − (c − d) = +0.00 [+0.00, +0.00] points over 3 seeds → **not reproduced** (the interval includes "
            "zero: the data cannot tell); the differences are equal on every seed") in out


def test_a_secondary_metric_the_subtracted_pair_lacks_is_n_a_in_a_difference_of_differences(tmp_path, synthetic_raw,
                                                                                            capsys):
    """a and b log the projector kNN (finals 0.35 + 0.01 seed and 0.30), c and d do not (older code): the
    (a − b) − (c − d) cell on it is n/a, not a traceback, and a − b alone has it; the primary decides."""
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60] * 3, "c": [0.59, 0.60, 0.60], "d": [0.60] * 3}
    did = {"arm": "a", "baseline": "b", "minus": {"arm": "c", "baseline": "d"}}
    suite_file = fake_suite(tmp_path, synthetic_raw, [{**did, "direction": "greater"}], finals)
    suite = yaml.safe_load(suite_file.read_text())
    write_yaml(suite_file, {**suite, "secondary": ["knn_projector_top1"],
                            "secondary_comparisons": [{"arm": "a", "baseline": "b"}]})
    for arm, final in (("a", 0.35), ("b", 0.30)):
        for seed in (0, 1, 2):
            path = tmp_path / "runs" / arm / f"seed_{seed}" / "summary.json"
            summary = json.loads(path.read_text())
            summary["initial"]["knn_projector_top1"] = 0.30
            summary["final"]["knn_projector_top1"] = final + (0.01 * seed if arm == "a" else 0)
            path.write_text(json.dumps(summary))
    assert main(["claim", str(suite_file)]) == 0
    out = capsys.readouterr().out
    assert "| (a − b) − (c − d) | decides | +3.33 [+1.90, +4.77] (ahead on 3/3) | n/a |" in out
    assert "| a − b | secondary, decides nothing | +3.00 [+0.52, +5.48] (ahead on 3/3) | +6.00 [+3.52, +8.48] " \
           "(ahead on 3/3) |" in out
    assert out.rstrip().endswith("**Claim reproduced**.")


def test_arms_that_leave_out_a_deciding_comparison_give_no_verdict_of_the_claim(tmp_path, synthetic_raw, capsys):
    # a - b reproduced (+3.00 [+0.52, +5.48]); c - b not (+3.00 [-3.57, +9.57]): the claim is not reproduced
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.61, 0.62, 0.66]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"},
                                                 {"arm": "c", "baseline": "b", "direction": "greater"}], finals)
    assert main(["claim", str(suite)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("**Claim not reproduced** (every comparison must be reproduced).")
    assert main(["claim", str(suite), "--arms", "a,b"]) == 0
    out = capsys.readouterr().out
    assert "claimed a > b: a − b = +3.00 [+0.52, +5.48] points over 3 seeds → **reproduced**" in out
    assert "**Claim" not in out
    assert out.rstrip().endswith("**Partial: no verdict of the claim**: `--arms` left out its deciding comparison "
                                 "c − b, and the claim is reproduced only when every one is.")


def test_a_run_of_another_seed_in_a_seeds_folder_is_one_line_before_anything_runs(tmp_path, synthetic_raw, capsys,
                                                                                  monkeypatch):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    (tmp_path / "runs" / "a" / "seed_2" / "summary.json").unlink()  # a run to resume, were the check late
    misplaced = tmp_path / "runs" / "b" / "seed_1"
    shutil.rmtree(misplaced)
    shutil.copytree(tmp_path / "runs" / "b" / "seed_0", misplaced)  # seed 0's run, copied by hand
    for extra in ([], ["--no-run"]):
        assert main(["claim", str(suite), *extra]) == 2
        assert capsys.readouterr().err == (f"fedssl: error: {misplaced}: scenario.yaml: expected a run of seed 1 (its "
                                           f"folder's), found one of seed 0; move it away or use another --runs-dir\n")


@pytest.mark.parametrize("primary, expected", [
    ("linear_top1_5pct", "its eval.label_fractions are [0.01, 0.1]"),
    ("finetune_top1_1pct", "its eval.finetune_steps is 0"),
])
def test_a_label_efficient_metric_the_arms_do_not_evaluate_is_one_line_before_anything_runs(
        tmp_path, synthetic_raw, capsys, monkeypatch, primary, expected):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    scenario_file = write_yaml(tmp_path / "tiny.yaml", {**synthetic_raw, "eval": {
        **synthetic_raw["eval"], "label_fractions": [0.01, 0.1]}})
    suite = write_yaml(tmp_path / "suite.yaml", {
        "claim": "x", "seeds": [0], "primary": "linear_top1", "secondary": [primary],
        "arms": {"a": {"scenario": str(scenario_file)}, "b": {"scenario": str(scenario_file),
                                                              "set": ["training.lr=0.01"]}},
        "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "runs")})
    assert main(["claim", str(suite)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {suite}: arms.a: its runs would not evaluate {primary} "
                                       f"({expected}); expected a metric they evaluate\n")
    assert not (tmp_path / "runs").exists()
    from analysis.claims import unevaluated
    scenario = load_scenario(scenario_file, ["eval.finetune_steps=5"])
    assert [unevaluated(scenario, m) for m in ("linear_top1_10pct", "tier/knn_top1_1pct", "finetune_top1_1pct",
                                               "knn_projector_top1")] == [None] * 4


def test_an_interrupted_run_whose_checkpoint_is_damaged_is_one_line_before_anything_runs(tmp_path, synthetic_raw,
                                                                                         capsys, monkeypatch):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    interrupted = tmp_path / "runs" / "a" / "seed_2"
    (interrupted / "summary.json").unlink()
    (interrupted / "checkpoints" / "round_00001").mkdir(parents=True)
    (interrupted / "checkpoints" / "round_00001" / "state.pt").write_bytes(b"PK\x03\x04 cut short")
    assert main(["claim", str(suite)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {interrupted / 'checkpoints' / 'round_00001' / 'state.pt'}: -: cannot be "
                          f"read") and err.count("\n") == 1, err
    # a readable checkpoint of other networks (a projector 4 wide) than the arm's scenario describes
    torch.save({"round": 1, "state": {"weights": {"online.projector.0.weight": torch.zeros(4, 4)}}},
               interrupted / "checkpoints" / "round_00001" / "state.pt")
    assert main(["claim", str(suite)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {interrupted / 'checkpoints' / 'round_00001' / 'state.pt'}: "
                          f"state.weights.online.projector.0.weight: expected a tensor of shape [") and \
        err.endswith(", got [4, 4]: the run's scenario.yaml describes other networks than this checkpoint holds "
                     "(was it edited?)\n"), err


def test_a_run_stopped_before_it_began_leaves_no_folder_of_its_arm(tmp_path, synthetic_raw, capsys, monkeypatch):
    """A stop (``--until``'s deadline, a signal) that lands as a new arm's first run starts, before the
    run made its directory: nothing of the arm is left behind (an empty arm folder was)."""
    import simulator.run
    from simulator.run import RunStopped

    def stopped_before_its_directory(*args, **kwargs):
        raise RunStopped("SIGTERM", None, None, 2)

    monkeypatch.setattr(simulator.run, "run_scenario", stopped_before_its_directory)
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    shutil.rmtree(tmp_path / "runs" / "b")
    assert main(["claim", str(suite)]) == 128 + 15
    assert capsys.readouterr().err.rstrip().endswith("stopped by SIGTERM before its first round; nothing was written; "
                                                     "run the claim again to go on")  # true of the arm's folder too
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a"]


def test_a_deadline_that_comes_when_every_run_has_finished_prints_the_claim(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    for _ in range(3):  # the timer goes off inside the block or after it: the same outcome
        assert main(["claim", str(suite), "--until", "+0s"]) == 0
        assert capsys.readouterr().out.rstrip().endswith("**Claim reproduced**.")


# ---- errors in the suite file ---------------------------------------------------------------

def assert_one_line_errors(suite, good, cases, out, capsys):
    """Each (change, expected) of ``cases``: the suite file ``good`` changed so, written to ``suite``, makes
    ``fedssl claim`` exit 2 with the one line ``SUITE: expected`` and leaves ``out`` unwritten."""
    for change, expected in cases:
        write_yaml(suite, {**good, **change})
        assert main(["claim", str(suite)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fedssl: error: {suite}: {expected}"), err
        assert err.count("\n") == 1, err
        assert not out.exists()


def test_suite_errors_are_one_line_exit_2_and_write_nothing(tmp_path, synthetic_raw, capsys):
    scenario_file = write_yaml(tmp_path / "tiny.yaml", synthetic_raw)
    bad_file = write_yaml(tmp_path / "bad.yaml", {**synthetic_raw, "training": {"lr": -1}})
    good = {"claim": "x", "seeds": [0, 1], "primary": "linear_top1",
            "arms": {"a": {"scenario": str(scenario_file)}, "b": {"scenario": str(scenario_file),
                                                                  "set": ["training.lr=0.01"]}},
            "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "out")}
    cases = [
        ({"colour": 1}, "colour: unknown key; expected one of claim, paper, seeds"),
        ({"seeds": [0, 0]}, "seeds: expected a non-empty list of distinct non-negative integers, got [0, 0]"),
        ({"seeds": [[0], 1]}, "seeds: expected a non-empty list of distinct non-negative integers, got [[0], 1]"),
        ({"seeds": [{"a": 1}]}, "seeds: expected a non-empty list of distinct non-negative integers, got [{'a': 1}]"),
        ({"primary": None}, "primary: expected a metric the evaluation gives"),
        ({"comparisons": [{"arm": "a", "baseline": "z", "direction": "greater"}]},
         "comparisons[0].baseline: expected one of the arms a, b, got 'z'"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "bigger"}]},
         "comparisons[0].direction: expected one of greater, equivalent, not_greater, got 'bigger'"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "equivalent"}]},
         "comparisons[0].margin: expected a positive finite number of points with direction equivalent, got None"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "equivalent", "margin": float("inf")}]},
         "comparisons[0].margin: expected a positive finite number of points with direction equivalent, got inf"),
        # an integer past float's range: math.isfinite's OverflowError, a traceback
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "equivalent", "margin": 10**400}]},
         "comparisons[0].margin: expected a positive finite number of points with direction equivalent, got 1000"),
        ({"primary": "linear_top5"}, "primary: expected a metric the evaluation gives (e.g. linear_top1"),
        ({"secondary": ["small_cnn/knn_top2"]}, "secondary: expected a metric the evaluation gives"),
        ({"secondary": ["knn_top1", "knn_top1"]}, "secondary: expected each metric once, got ['knn_top1', 'knn_top1']"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}] * 2},
         "comparisons[1]: expected each comparison once; it repeats comparisons[0]"),
        ({"secondary_comparisons": [{"arm": "a", "baseline": "b"}] * 2},
         "secondary_comparisons[1]: expected each comparison once; it repeats secondary_comparisons[0]"),
        ({"comparisons": [{"arm": ["a"], "baseline": "b", "direction": "greater"}]},
         "comparisons[0].arm: expected one of the arms a, b, got ['a']"),
        ({"secondary_comparisons": [{"arm": "a", "baseline": {"b": 1}}]},
         "secondary_comparisons[0].baseline: expected one of the arms a, b, got {'b': 1}"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "minus": {"arm": "b", "baseline": "a"},
                           "direction": "greater"}]},
         "comparisons[0].minus: expected another pair of arms than the comparison's own"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "minus": {"arm": "a"}, "direction": "greater"}]},
         "comparisons[0].minus: expected a mapping {arm, baseline} (the difference subtracted), got {'arm': 'a'}"),
        ({"secondary_comparisons": [{"arm": "a", "baseline": "b", "minus": {"arm": "a", "baseline": "z"}}]},
         "secondary_comparisons[0].minus.baseline: expected one of the arms a, b, got 'z'"),
        ({"secondary_comparisons": [{"arm": "a", "baseline": "b", "minus": ["a", "b"]}]},
         "secondary_comparisons[0].minus: expected a mapping {arm, baseline} (the difference subtracted), got "
         "['a', 'b']"),
        ({"arms": {**good["arms"], "b": {"scenario": str(scenario_file), "set": ["seed=5"]}}},
         "arms.b.set: expected no seed=...: an arm's seeds come from the suite's seeds"),
        ({"set": ["training.lr=0.1", "seed=5"]}, "set: expected no seed=...: an arm's seeds come from the suite's"),
        ({"arms": {"a": {"scenario": str(tmp_path / "missing.yaml")}, "b": {"scenario": str(scenario_file)}}},
         "arms.a: " + str(tmp_path / "missing.yaml") + ": -: cannot read the file"),
        ({"arms": {**good["arms"], "b": {"scenario": str(scenario_file), "set": ["training.lr=-1"]}}},
         "arms.b: set: training.lr: expected a positive number, got -1"),
        ({"arms": {**good["arms"], "b": {"scenario": str(scenario_file), "set": ["=3"]}}},
         "arms.b: set: =3: expected dotted.key=value"),  # was named --set, the command line's
        ({"arms": {**good["arms"], "b": {"scenario": str(scenario_file), "set": ["training.lr={a"]}}},
         "arms.b: set: training.lr: the value is not valid YAML"),
        ({"arms": {**good["arms"], "b": {"scenario": str(scenario_file), "set": ["training.rounds=2"]}},
          "set": ["training.lr=-1"]},  # the suite's shared overrides, as the arm's own
         "arms.a: set: training.lr: expected a positive number, got -1"),
        ({"arms": {**good["arms"], "b": {"scenario": str(bad_file)}}},
         "arms.b: " + str(bad_file) + ": training.lr: expected a positive number, got -1"),
        # a margin of 0 would make an equivalence claim unreachable and "does not help" mean "hurts";
        # true is YAML's boolean, not a number of points; a margin beside "greater" would be ignored
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "equivalent", "margin": 0}]},
         "comparisons[0].margin: expected a positive finite number of points with direction equivalent, got 0"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "not_greater", "margin": True}]},
         "comparisons[0].margin: expected a positive finite number of points with direction not_greater, got True"),
        ({"comparisons": [{"arm": "a", "baseline": "b", "direction": "greater", "margin": 1.0}]},
         "comparisons[0].margin: expected no margin with direction greater"),
        ({"comparisons": [{"arm": "a", "baseline": "a", "direction": "greater"}]},
         "comparisons[0]: expected two different arms"),  # a difference of zero on every seed
        ({"secondary": ["linear_top1"]}, "secondary: expected metrics other than the primary one (linear_top1)"),
        ({"seeds": [True]}, "seeds: expected a non-empty list of distinct non-negative integers, got [True]"),
        ({"seeds": [0, -1]}, "seeds: expected a non-empty list of distinct non-negative integers, got [0, -1]"),
    ]
    assert_one_line_errors(tmp_path / "suite.yaml", good, cases, tmp_path / "out", capsys)
    assert main(["claim", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: -: cannot read the file" in capsys.readouterr().err


# ---- a replicate: the original suite on other seeds -------------------------------------------

def test_a_replicate_prints_what_a_full_copy_of_its_original_on_its_seeds_prints(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    original = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    raw = yaml.safe_load(original.read_text())
    # the original ran other seeds (none of them kept here); the replicate's seeds 0-2 are the kept runs
    write_yaml(original, {**raw, "seeds": [7, 8, 9], "out": str(tmp_path / "elsewhere")})
    replicate = tmp_path / "claims" / "fresh.yaml"
    replicate.write_text(f"# comments stay comments\nreplicates: suite.yaml\nclaim: a beats b again\n"
                         f"seeds: [0, 1, 2]\nout: {tmp_path / 'runs'}\n")
    copy = write_yaml(tmp_path / "claims" / "copy.yaml", {**raw, "claim": "a beats b again"})
    assert main(["claim", str(copy), "--no-run"]) == 0
    expected = capsys.readouterr().out
    assert main(["claim", str(replicate), "--no-run"]) == 0
    out = capsys.readouterr().out
    assert out == expected.replace(str(copy), str(replicate))
    assert "# Claim: a beats b again" in out and "Paper: Nobody et al., Table 1" in out  # its claim, the paper's
    assert "seeds 0,1,2" in out and "**Claim reproduced**." in out
    # an edit of the original reaches the replicate: the two cannot drift apart
    write_yaml(original, {**raw, "seeds": [7, 8, 9], "primary": "knn_top1", "secondary": []})
    assert read_suite(replicate).primary == "knn_top1"


def test_a_replicate_leaves_out_arms_with_the_secondary_comparisons_that_read_them(tmp_path, synthetic_raw):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.61, 0.62, 0.66]}
    original = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    raw = yaml.safe_load(original.read_text())
    write_yaml(original, {**raw, "seeds": [7], "secondary_comparisons": [{"arm": "c", "baseline": "b"},
                                                                          {"arm": "b", "baseline": "a"}]})
    replicate = write_yaml(tmp_path / "claims" / "fresh.yaml", {"replicates": "suite.yaml", "claim": "again",
                                                                "seeds": [0, 1], "without_arms": ["c"], "out": "o"})
    suite = read_suite(replicate)
    assert list(suite.arms) == ["a", "b"] and suite.seeds == (0, 1) and suite.out == "o"
    assert [(c.arm, c.baseline) for c in suite.secondary_comparisons] == [("b", "a")]
    assert [(c.arm, c.baseline, c.direction) for c in suite.comparisons] == [("a", "b", "greater")]
    assert suite.left_out == ()  # read as a suite of these arms: the report names no --arms


def test_replicate_errors_are_one_line_exit_2_and_write_nothing(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    original = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    raw = yaml.safe_load(original.read_text())
    write_yaml(original, {**raw, "seeds": [7, 8], "out": str(tmp_path / "out")})
    write_yaml(tmp_path / "claims" / "broken.yaml", {**raw, "seeds": [0, 0]})
    write_yaml(tmp_path / "claims" / "listed.yaml", [raw])
    write_yaml(tmp_path / "claims" / "chained.yaml", {"replicates": "suite.yaml", "claim": "x", "seeds": [3],
                                                      "out": str(tmp_path / "out")})
    good = {"replicates": "suite.yaml", "claim": "again", "seeds": [0, 1], "out": str(tmp_path / "out")}
    claims = tmp_path / "claims"
    cases = [
        ({"primary": "knn_top1"}, "primary: unknown key in a replicate (every other key is its original's); "
                                  "expected one of replicates, claim, seeds, out, without_arms"),
        ({"seeds": [1, 8]}, "seeds: expected seeds none of whose runs the original (suite.yaml) has, got [8] among them"),
        ({"seeds": [0, 0]}, "seeds: expected a non-empty list of distinct non-negative integers, got [0, 0]"),
        ({"replicates": "nope.yaml"}, f"replicates: {claims / 'nope.yaml'}: -: cannot read the file"),
        ({"replicates": 3}, "replicates: expected the path of a suite file, relative to this file's folder, got 3"),
        ({"replicates": "broken.yaml"}, f"replicates: {claims / 'broken.yaml'}: seeds: expected a non-empty list"),
        ({"replicates": "listed.yaml"}, f"replicates: {claims / 'listed.yaml'}: -: expected a mapping with the keys"),
        ({"replicates": "chained.yaml"}, "replicates: expected an original suite, got 'chained.yaml', itself a "
                                         "replicate of 'suite.yaml'"),
        ({"replicates": "replicate.yaml"}, "replicates: expected an original suite, got 'replicate.yaml', itself a "
                                           "replicate of 'replicate.yaml'"),  # of itself
        ({"without_arms": ["z"]}, "without_arms: expected a list of distinct arms of suite.yaml (a, b), got ['z']"),
        ({"without_arms": ["b"]}, "without_arms: expected arms no deciding comparison reads; a − b reads b"),
    ]
    assert_one_line_errors(claims / "replicate.yaml", good, cases, tmp_path / "out", capsys)
    for missing in ("claim", "seeds", "out"):
        replicate = write_yaml(claims / "replicate.yaml", {k: v for k, v in good.items() if k != missing})
        assert main(["claim", str(replicate)]) == 2
        assert capsys.readouterr().err == (f"fedssl: error: {replicate}: {missing}: expected this key (missing; a "
                                           f"replicate names its own)\n")


def test_an_interrupted_run_whose_data_are_gone_is_one_line_before_anything_runs(tmp_path, synthetic_raw, capsys):
    scenario_file = write_yaml(tmp_path / "tiny.yaml", synthetic_raw)
    suite = write_yaml(tmp_path / "suite.yaml", {
        "claim": "x", "seeds": [0], "primary": "linear_top1",
        "arms": {"a": {"scenario": str(scenario_file)}, "b": {"scenario": str(scenario_file),
                                                              "set": ["training.lr=0.01"]}},
        "comparisons": [{"arm": "a", "baseline": "b", "direction": "greater"}], "out": str(tmp_path / "runs")})
    interrupted = tmp_path / "runs" / "a" / "seed_0"  # its scenario names a data root that is gone
    gone = tmp_path / "gone"
    write_yaml(interrupted / "scenario.yaml", load_scenario(scenario_file, [
        "seed=0", "dataset.name=fashion_mnist", f"dataset.root={gone}"]))
    assert main(["claim", str(suite)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: fashion_mnist: dataset.root {gone} is not a directory"), err
    assert err.count("\n") == 1, err
    assert not (tmp_path / "runs" / "b").exists()  # nothing ran


@pytest.mark.parametrize("damaged, content, expected", [
    ("summary.json", "{not json", "summary.json: -: not valid JSON"),
    ("scenario.yaml", "name: [unclosed", "scenario.yaml: line 1: not valid YAML"),
])
@pytest.mark.parametrize("extra", [[], ["--no-run"]])
def test_a_damaged_kept_run_is_one_line_naming_its_file_before_anything_runs(tmp_path, synthetic_raw, capsys,
                                                                            monkeypatch, damaged, content, expected,
                                                                            extra):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    run_dir = tmp_path / "runs" / "b" / "seed_1"
    (run_dir / damaged).write_text(content)
    (tmp_path / "runs" / "a" / "seed_2" / "summary.json").unlink()  # a run to resume, were the check late
    assert main(["claim", str(suite), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {run_dir / expected}") and err.count("\n") == 1, err


@pytest.mark.parametrize("key, value", [("code", 5), ("numerics", 5), ("numerics", ["torch 2.14.1", 3])])
@pytest.mark.parametrize("extra", [[], ["--no-run"]])
def test_a_kept_runs_code_or_numerics_of_the_wrong_type_is_one_line_before_anything_runs(
        tmp_path, synthetic_raw, capsys, monkeypatch, key, value, extra):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    path = tmp_path / "runs" / "b" / "seed_1" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    (tmp_path / "runs" / "a" / "seed_2" / "summary.json").unlink()  # a run to resume, were the check late
    assert main(["claim", str(suite), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {path}: {key}: expected a list of strings (") and err.count("\n") == 1, err
    assert err.endswith(f"got {value!r}\n"), err


def test_a_runs_dir_that_is_a_file_is_one_line_before_anything_runs(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    afile = tmp_path / "notes.txt"
    afile.write_text("data")
    assert main(["claim", str(suite), "--runs-dir", str(afile)]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {afile}: is a file; expected a directory for --runs-dir\n"
    assert afile.read_text() == "data"


@pytest.mark.parametrize("extra", [[], ["--no-run"]])
@pytest.mark.parametrize("file_at", ["b/seed_1", "b"])
def test_a_file_where_a_run_or_arm_directory_belongs_is_one_line_before_anything_runs(
        tmp_path, synthetic_raw, capsys, monkeypatch, extra, file_at):
    import simulator.run
    monkeypatch.setattr(simulator.run, "run_scenario", lambda *a, **k: pytest.fail("a run started"))
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    (tmp_path / "runs" / "a" / "seed_0" / "summary.json").unlink()  # a run to resume, were the check late
    afile = tmp_path / "runs" / file_at
    shutil.rmtree(afile)
    afile.write_text("data")
    assert main(["claim", str(suite), *extra]) == 2
    where = "is a file" if file_at == "b/seed_1" else f"lies under the file {afile}"
    captured = capsys.readouterr()
    assert captured.err == (f"fedssl: error: {tmp_path / 'runs' / 'b' / 'seed_0' if file_at == 'b' else afile}: "
                            f"{where}; expected a directory for the run of arm b, seed "
                            f"{0 if file_at == 'b' else 1}\n"), captured.err
    assert afile.read_text() == "data"


def test_the_shipped_suites_are_well_formed():
    """Every ``claims/*.yaml`` reads, and every scenario it names loads with its overrides.

    The primary metric is the backbone's linear probe (item 5 of the protocol), except where the
    claim is read on another column of the paper's table, as its protocol declares: Orchestra's
    Table 1 semi-supervised fine-tuning (results/orchestra.md). The seeds are the protocol's 0-4, except
    in a replication of a suite on fresh seeds, as its protocol declares (results/uv.md, results/fedsc.md,
    results/orchestra.md)."""
    suites = sorted((REPO / "claims").glob("*.yaml"))
    assert {p.stem for p in suites} >= {"fedsc_full", "fedsc_partial", "fedsc_dp", "uv_label_skew",
                                        "uv_covariate_shift", "orchestra", "hetero",
                                        "orchestra_paper_skew_finetune"}
    declared_primary = {"orchestra_paper_skew_finetune": "finetune_top1_10pct",
                        "orchestra_paper_skew_finetune_fresh": "finetune_top1_10pct"}
    fresh = (186, 187, 188, 189, 190)
    declared_seeds = {"uv_covariate_shift_fresh": fresh, "uv_label_skew_fresh": fresh,
                      "fedsc_dp_same_schedule_fresh": (191, 192, 193, 194, 195),
                      "fedsc_partial_fresh": (196, 197, 198, 199, 200),
                      "fedsc_full_fresh": (196, 197, 198, 199, 200),
                      "orchestra_paper_skew_fresh": (201, 202, 203, 204, 205),
                      "orchestra_paper_skew_ablations_fresh": (201, 202, 203, 204, 205),
                      "orchestra_paper_skew_baselines_fresh": (201, 202, 203, 204, 205),
                      "orchestra_paper_skew_byol_fresh": (201, 202, 203, 204, 205),
                      "hetero_fresh": (206, 207, 208, 209, 210),
                      "uv_covariate_shift_paper_rotations_fresh": (211, 212, 213, 214, 215),
                      "orchestra_paper_skew_finetune_fresh": (216, 217, 218, 219, 220),
                      "fedsc_partial_unbound_clip_fresh": (221, 222, 223, 224, 225),
                      "fedsc_full_unbound_clip_fresh": (226, 227, 228, 229, 230),
                      "fedsc_dp_fresh": (231, 232, 233, 234, 235),
                      "orchestra_paper_skew_participation_fresh": (236, 237, 238, 239, 240),
                      "orchestra_fresh": (241, 242, 243, 244, 245)}
    for path in suites:
        suite = read_suite(path)
        assert suite.seeds == declared_seeds.get(path.stem, (0, 1, 2, 3, 4)), path
        if path.stem.endswith("_fresh"):  # a replication names its original rather than copying it
            assert yaml.safe_load(path.read_text())["replicates"] == path.name.replace("_fresh", ""), path
        assert suite.primary == declared_primary.get(path.stem, "linear_top1"), path
        for arm in suite.arms.values():
            load_scenario(REPO / arm.scenario, [*suite.shared_overrides, *arm.overrides])


# ---- end to end through Ray ------------------------------------------------------------------

def git_kept(runs: Path, claim_dir: str) -> list[Path]:
    """The files under ``runs`` that git would keep were they the suite's ``out`` (``claim_dir``,
    under the repository's ``results/runs/``)."""
    files = [p for p in runs.rglob("*") if p.is_file()]
    names = [f"{claim_dir}/{p.relative_to(runs)}" for p in files]
    ignored = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"],
                             input="\n".join(names), capture_output=True, text=True).stdout.split()
    assert ignored, "results/runs/.gitignore drops nothing: checkpoints and TensorBoard logs would be committed"
    return [p for p, name in zip(files, names) if name not in set(ignored)]


def test_claim_runs_once_never_repeats_and_resumes_an_interrupted_run(synthetic_raw, tmp_path, capsys, monkeypatch):
    import simulator.run
    calls = []
    real_run = simulator.run.run_scenario

    def recording_run(scenario, out=None, progress=True, resume_dir=None):
        calls.append((scenario["seed"], scenario["training"]["lr"], out, resume_dir))
        return real_run(scenario, out, progress=progress, resume_dir=resume_dir)

    monkeypatch.setattr(simulator.run, "run_scenario", recording_run)
    raw = {**synthetic_raw, "executor": "in_process", "eval": {**synthetic_raw["eval"], "every": 2},
           "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    scenario_file = write_yaml(tmp_path / "tiny.yaml", raw)
    suite = write_yaml(tmp_path / "suite.yaml", {
        "claim": "lr 0.05 beats lr 0.01", "seeds": [0, 1], "primary": "linear_top1", "secondary": ["knn_top1"],
        "arms": {"fast": {"scenario": str(scenario_file)},
                 "slow": {"scenario": str(scenario_file), "set": ["training.lr=0.01"]}},
        "comparisons": [{"arm": "fast", "baseline": "slow", "direction": "greater"}],
        "out": str(tmp_path / "unused")})
    runs = tmp_path / "runs"
    assert main(["claim", str(suite), "--runs-dir", str(runs)]) == 0
    first = capsys.readouterr()
    # seed by seed: every arm of seed 0 before seed 1 (a suite stopped part-way leaves complete pairs)
    assert [(seed, lr, resume) for seed, lr, _, resume in calls] == [
        (0, 0.05, None), (0, 0.01, None), (1, 0.05, None), (1, 0.01, None)]
    assert first.err.count("claim: running ") == 4
    run_dirs = [runs / arm / f"seed_{seed}" for arm in ("fast", "slow") for seed in (0, 1)]
    for run_dir in run_dirs:
        assert json.loads((run_dir / "summary.json").read_text())["rounds_completed"] == 2
    assert "| fast − slow | decides | " in first.out and "**Claim " in first.out
    assert not (tmp_path / "unused").exists()

    # a second invocation runs nothing: no run is started, no file is rewritten, the same table
    stamps = {p: p.stat().st_mtime_ns for run_dir in run_dirs for p in [run_dir, *run_dir.rglob("*")]}
    calls.clear()
    assert main(["claim", str(suite), "--runs-dir", str(runs)]) == 0
    second = capsys.readouterr()
    assert calls == [] and "claim: " not in second.err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert second.out == first.out

    # a clone holds only what results/runs/.gitignore keeps of a suite's runs: enough to run nothing
    # and print the same table
    kept = tmp_path / "kept"
    for path in git_kept(runs, "results/runs/a_claim"):
        (kept / path.relative_to(runs)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, kept / path.relative_to(runs))
    assert sorted(p.name for p in kept.rglob("*") if p.is_file()) == sorted(
        ["scenario.yaml", "summary.json", "metrics.parquet"] * 4)
    assert main(["claim", str(suite), "--runs-dir", str(kept)]) == 0
    fourth = capsys.readouterr()
    assert calls == [] and "claim: " not in fourth.err
    assert fourth.out.replace(str(kept), str(runs)) == first.out

    # interrupted after its round-1 checkpoint (summary and the round-2 checkpoint never written): resumed
    interrupted = runs / "slow" / "seed_1"
    (interrupted / "summary.json").unlink()
    shutil.rmtree(interrupted / "checkpoints" / "round_00002")
    kept = (interrupted / "checkpoints" / "round_00001" / "state.pt").stat().st_mtime_ns
    assert main(["claim", str(suite), "--runs-dir", str(runs)]) == 0
    third = capsys.readouterr()
    assert [(seed, lr, resume) for seed, lr, _, resume in calls] == [(1, 0.01, str(interrupted))]
    assert "claim: resuming slow seed 1 (1/1)" in third.err
    assert (interrupted / "checkpoints" / "round_00001" / "state.pt").stat().st_mtime_ns == kept
    assert json.loads((interrupted / "summary.json").read_text())["rounds_completed"] == 2
    assert third.out == first.out  # the resumed run ends where the uninterrupted one did


def test_a_deadline_stops_the_run_under_way_at_a_round_end_and_a_later_call_resumes_it(
        synthetic_raw, tmp_path, capsys, monkeypatch):
    """``--until``: the alarm (fired here as the third run writes its round-1 checkpoint, the real
    timer being pinned by tests/simulator/test_deadline.py) stops that run at the end of that round,
    starts no later run, prints the table over the finished seed and exits 124."""
    import simulator.deadline
    import simulator.run
    alarms, calls = [], []

    class RecordedAlarm(simulator.deadline.stop_at):
        def __init__(self, deadline):
            super().__init__(deadline)
            alarms.append(self)

    real_run, real_checkpoint = simulator.run.run_scenario, simulator.run.write_checkpoint

    def recording_run(scenario, out=None, progress=True, resume_dir=None):
        calls.append((scenario["seed"], scenario["training"]["lr"], resume_dir))
        return real_run(scenario, out, progress=progress, resume_dir=resume_dir)

    def checkpoint_then_deadline(run_dir, round_index, *args):
        real_checkpoint(run_dir, round_index, *args)
        if len(calls) == 3 and round_index == 1:
            alarms[-1].fire()

    monkeypatch.setattr(simulator.deadline, "stop_at", RecordedAlarm)
    monkeypatch.setattr(simulator.run, "run_scenario", recording_run)
    monkeypatch.setattr(simulator.run, "write_checkpoint", checkpoint_then_deadline)
    raw = {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"], "rounds": 6},
           "eval": {**synthetic_raw["eval"], "every": 6}, "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    scenario_file = write_yaml(tmp_path / "tiny.yaml", raw)
    suite = write_yaml(tmp_path / "suite.yaml", {
        "claim": "lr 0.05 beats lr 0.01", "seeds": [0, 1], "primary": "linear_top1",
        "arms": {"fast": {"scenario": str(scenario_file)},
                 "slow": {"scenario": str(scenario_file), "set": ["training.lr=0.01"]}},
        "comparisons": [{"arm": "fast", "baseline": "slow", "direction": "greater"}], "out": str(tmp_path / "runs")})
    stopped_run = tmp_path / "runs" / "fast" / "seed_1"

    assert main(["claim", str(suite), "--until", "+3h"]) == 124
    first = capsys.readouterr()
    assert [(seed, lr) for seed, lr, _ in calls] == [(0, 0.05), (0, 0.01), (1, 0.05)]  # no fourth run
    assert alarms[-1].fired and alarms[-1].timer is not None
    alarms[-1].timer.join(10)  # cancelled: its thread ends on its own schedule
    assert not alarms[-1].timer.is_alive()
    assert f"claim: runs stop at {alarms[-1].deadline}" in first.err
    assert first.err.strip().splitlines()[-1] == (f"claim: the deadline stopped the claim {stopped_run} after round 1 "
                                                  f"of 6; run it again to go on (a stopped run resumes from its "
                                                  f"checkpoint)")
    assert not (stopped_run / "summary.json").exists()
    assert sorted(p.name for p in (stopped_run / "checkpoints").iterdir()) == ["round_00001"]
    assert not (tmp_path / "runs" / "slow" / "seed_1").exists()
    assert "**Interim: seed 1 of the suite has not finished in every arm" in first.out
    assert first.out.rstrip().endswith("**No verdict yet**: 1 of 2 seeds finished.")

    calls.clear()
    assert main(["claim", str(suite)]) == 0
    second = capsys.readouterr()
    assert calls == [(1, 0.05, str(stopped_run)), (1, 0.01, None)]
    assert json.loads((stopped_run / "summary.json").read_text())["rounds_completed"] == 6
    assert "**Claim " in second.out and "Interim" not in second.out


def test_a_group_metrics_round_0_is_read_from_round_0_of_the_logged_metrics(tmp_path):
    """``GROUP/METRIC`` (a per-tier mean): ``initial`` is round 0's ``eval/GROUP/METRIC_mean`` in
    ``metrics.parquet``, ``final`` the run's last group means (reading the final value for both passed
    every test but the kept Hetero report's)."""
    from analysis.claims import metric_value
    from simulator.runlog import RunLog
    log = RunLog(tmp_path, 0.0)
    log.log(0, {"eval/small/knn_top1_mean": 0.25, "eval/large/knn_top1_mean": 0.3})
    log.log(5, {"eval/small/knn_top1_mean": 0.75, "eval/large/knn_top1_mean": 0.8})
    log.flush()
    run = {"dir": str(tmp_path), "groups": {"small": {"knn_top1": 0.75}, "large": {"knn_top1": 0.8}}}
    assert metric_value(run, "initial", "small/knn_top1") == 0.25
    assert metric_value(run, "final", "small/knn_top1") == 0.75
    assert metric_value(run, "initial", "large/knn_top1") == 0.3
    assert metric_value(run, "initial", "tiny/knn_top1") is None
    # a group first evaluated after round 0 has no round-0 value (not its first logged one)
    log.log(5, {"eval/late/knn_top1_mean": 0.5})
    log.flush()
    assert metric_value({**run, "groups": {**run["groups"], "late": {"knn_top1": 0.5}}}, "initial",
                        "late/knn_top1") is None


# ---- the kept reports ----------------------------------------------------------------------

KEPT_REPORTS = sorted(r for r in (REPO / "results" / "claims").glob("*.md") if r.name != INDEX)  # INDEX: fedssl claims
# Reports whose runs were never kept in the repository (their "Suite" line names a scratch folder).
RUNS_NOT_KEPT = {"fedsc_dp_crop035.md", "fedsc_partial_crop035.md", "orchestra_lr005.md", "orchestra_r20.md"}


def test_the_reports_whose_runs_are_not_kept_are_the_known_ones():
    """A new report naming runs outside ``results/runs`` would escape the check below: it must be
    listed here on purpose."""
    outside = {r.name for r in KEPT_REPORTS if not report_sources(r)[1].startswith("results/runs/")}
    assert outside == RUNS_NOT_KEPT


@pytest.mark.parametrize("report", [r for r in KEPT_REPORTS if r.name not in RUNS_NOT_KEPT], ids=lambda r: r.name)
def test_a_kept_report_is_what_fedssl_claim_prints_from_its_kept_runs(report, monkeypatch, capsys):
    """Each report in ``results/claims/`` (from its "# Claim" line on; the notes above it are by hand)
    is what ``fedssl claim SUITE --runs-dir RUNS --no-run`` prints from the runs kept in the
    repository (with ``--arms`` where the report left arms out): a changed suite, a kept run changed or
    removed, or a change to the report's code shows here until the report is regenerated (and its change
    said in its notes)."""
    suite, runs = report_sources(report)
    left_out = left_out_arms(report)
    arms = [] if not left_out else ["--arms", ",".join(a for a in read_suite(suite).arms if a not in left_out)]
    monkeypatch.chdir(REPO)
    assert main(["claim", suite, "--runs-dir", runs, *arms, "--no-run"]) == 0
    text = report.read_text().splitlines()
    body = text[next(i for i, line in enumerate(text) if line.startswith("# Claim")):]
    assert capsys.readouterr().out.splitlines() == body
