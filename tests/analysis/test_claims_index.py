"""``fedssl claims``: the kept claim reports at a glance, recomputed from their suites and runs."""
from pathlib import Path

import yaml

from simulator.cli import main
from tests.analysis.test_claims import REPO, fake_suite

HEADER = ("| report | claim | seeds | deciding comparison (primary metric) | difference, points: mean [95% interval] | "
          "verdict | its arms: round 0 → final (%), gain [95% interval] | claim |")


def kept_report(folder: Path, name: str, suite: Path, capsys) -> Path:
    """The report ``fedssl claim SUITE --no-run`` prints, kept as ``folder/name``."""
    assert main(["claim", str(suite), "--no-run"]) == 0
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("> notes by hand\n\n" + capsys.readouterr().out)
    return folder / name


def index_lines(folder: Path, capsys) -> list[str]:
    assert main(["claims", str(folder)]) == 0
    return capsys.readouterr().out.splitlines()


def test_each_deciding_comparison_is_a_row_with_its_interval_verdict_and_its_arms_gains(tmp_path, synthetic_raw,
                                                                                        capsys):
    # a - b: +2, +3, +4 points: mean 3, [+0.52, +5.48] (t(0.975, 2) = 4.3027, standard error 1/sqrt(3));
    # c - b: 0, 0, +1: mean 0.33, [-1.10, +1.77]; gains over round 0 (0.50): a 12, 13, 14 -> +13.00
    # [+10.52, +15.48]; b 10 on every seed (an interval of no width, above zero); c 10, 10, 11
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.60, 0.60, 0.61]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"},
                                                 {"arm": "c", "baseline": "b", "direction": "greater"}], finals)
    kept_report(tmp_path / "reports", "ab.md", suite, capsys)
    lines = index_lines(tmp_path / "reports", capsys)
    assert lines[0] == HEADER
    assert lines[2] == ("| [ab.md](ab.md) | a beats b | 0,1,2 | a > b (linear_top1) | +3.00 [+0.52, +5.48] (ahead on 3/3) "
                        "| reproduced | a 50.00 → 63.00, +13.00 [+10.52, +15.48] (ahead on 3/3)<br>b 50.00 → 60.00, +10.00 "
                        "[+10.00, +10.00] (ahead on 3/3) | not reproduced |")
    assert lines[3] == ("| [ab.md](ab.md) | a beats b | 0,1,2 | c > b (linear_top1) | +0.33 [-1.10, +1.77] (ahead on 1/3) "
                        "| not reproduced | c 50.00 → 60.33, +10.33 [+8.90, +11.77] (ahead on 3/3)<br>b 50.00 → 60.00, "
                        "+10.00 [+10.00, +10.00] (ahead on 3/3) | not reproduced |")
    assert lines[-1] == "1 claim recomputed: 1 not reproduced."


def test_an_arm_that_did_not_learn_is_said_so_and_a_contradicted_claim_is_counted(tmp_path, synthetic_raw, capsys):
    # a - b: -10, -11, -12: contradicted; b does not move from its round 0: gain 0, not shown to learn
    finals = {"a": [0.40, 0.39, 0.38], "b": [0.50, 0.50, 0.50]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    kept_report(tmp_path / "reports", "ab.md", suite, capsys)
    lines = index_lines(tmp_path / "reports", capsys)
    assert "| contradicted | a 50.00 → 39.00, -11.00 [-13.48, -8.52] (ahead on 0/3) **not shown to learn**<br>b " \
           "50.00 → 50.00, +0.00 [+0.00, +0.00] (ahead on 0/3) **not shown to learn** | contradicted |" in lines[2]
    assert lines[-1] == "1 claim recomputed: 1 contradicted."


def test_an_unfinished_suite_has_no_verdict_and_a_report_without_its_runs_keeps_its_own_line(tmp_path, synthetic_raw,
                                                                                             capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    reports = tmp_path / "reports"
    kept_report(reports, "done.md", suite, capsys)
    moved = kept_report(reports, "moved.md", suite, capsys)
    moved.write_text(moved.read_text().replace(f"runs in `{tmp_path / 'runs'}`", "runs in `elsewhere/runs`"))
    (reports / "README.md").write_text("# an index: not a report\n")
    (tmp_path / "runs" / "a" / "seed_2" / "summary.json").unlink()  # seed 2 unfinished in arm a
    lines = index_lines(reports, capsys)
    assert lines[2].startswith("| [done.md](done.md) | a beats b | 0,1 of 3 | a > b (linear_top1) | +2.50 ")
    assert lines[2].endswith("| no verdict yet |") and "| no verdict yet | a 50.00 → 62.50" in lines[2]
    assert f"- [moved.md](moved.md) (suite `{suite}`, runs `elsewhere/runs` not here): **Claim reproduced**." in lines
    assert lines[-1] == "1 claim recomputed: 1 no verdict yet."
    assert all("README" not in line for line in lines)


def test_bad_folders_and_files_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "idea.md").write_text("# Claim: something\n\nno suite line\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.md").write_text("")
    cases = [
        (tmp_path / "absent", f"{tmp_path / 'absent'}: no such folder of claim reports"),
        (tmp_path / "file.md", f"{tmp_path / 'file.md'}: is a file; expected a folder of claim reports"),
        (tmp_path / "empty", f"{tmp_path / 'empty'}: no claim report (*.md); expected the reports fedssl claim prints"),
        (tmp_path / "notes", f"{tmp_path / 'notes' / 'idea.md'}: expected a claim report (a line \"Suite `SUITE`; "
                             f"runs in `RUNS`; ...\", as fedssl claim prints), found none"),
    ]
    for folder, message in cases:
        assert main(["claims", str(folder)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith(f"fedssl: error: {message}"), captured.err


def test_the_kept_index_is_what_fedssl_claims_prints_from_the_kept_reports(monkeypatch, capsys):
    """``results/claims/README.md`` (after its header) is ``fedssl claims``' output: a report added or
    regenerated, or a kept run changed, shows here until the index is regenerated."""
    monkeypatch.chdir(REPO)
    assert main(["claims"]) == 0
    kept = (REPO / "results" / "claims" / "README.md").read_text().splitlines()
    assert kept[0] == "# The claims at a glance" and kept[3] == ""
    assert capsys.readouterr().out.splitlines() == kept[4:]


def test_a_report_that_is_not_utf8_is_named(tmp_path, capsys):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "ab.md").write_bytes(b"# Claim: a beats b\n\nSuite `s.yaml`; runs in `r`; \xff\n")
    assert main(["claims", str(tmp_path / "reports")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"fedssl: error: {tmp_path / 'reports' / 'ab.md'}: not UTF-8 text; expected a "
                                   f"claim report"), captured.err


def test_a_claim_over_several_lines_stays_in_its_row(tmp_path, synthetic_raw, capsys):
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    suite.write_text(suite.read_text().replace("claim: a beats b", "claim: >\n  a beats b\n  | by far"))
    kept_report(tmp_path / "reports", "ab.md", suite, capsys)
    lines = index_lines(tmp_path / "reports", capsys)
    assert lines[2].startswith("| [ab.md](ab.md) | a beats b \\| by far | 0,1,2 | a > b (linear_top1) |")
    assert lines[3] == ""


def test_a_report_of_some_arms_is_recomputed_over_those_arms_and_is_partial(tmp_path, synthetic_raw, capsys):
    # the report of --arms a,b while c has no runs: a - b is decided on every seed, the claim is partial
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60], "c": [0.60, 0.61, 0.62]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"},
                                                 {"arm": "c", "baseline": "b", "direction": "greater"}], finals)
    for seed in range(3):
        (tmp_path / "runs" / "c" / f"seed_{seed}" / "summary.json").unlink()
    assert main(["claim", str(suite), "--no-run", "--arms", "a,b"]) == 0
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "ab.md").write_text(capsys.readouterr().out)
    lines = index_lines(tmp_path / "reports", capsys)
    assert lines[2].startswith("| [ab.md](ab.md) | a beats b | 0,1,2 | a > b (linear_top1) | +3.00 [+0.52, +5.48] "
                               "(ahead on 3/3) | reproduced | a 50.00 → 63.00")
    assert lines[2].endswith("| partial |") and len(lines) == 7
    assert lines[-1] == "1 claim recomputed: 1 partial."


def test_runs_that_differ_from_their_suite_as_it_is_now_are_listed_with_the_keys(tmp_path, synthetic_raw, capsys):
    # the suite's arm a changed after its runs (its lr, which it trains with): a's 3 runs of the report's
    # 6 are listed; a change the runs do not depend on (eval.every) lists nothing
    finals = {"a": [0.62, 0.63, 0.64], "b": [0.60, 0.60, 0.60]}
    suite = fake_suite(tmp_path, synthetic_raw, [{"arm": "a", "baseline": "b", "direction": "greater"}], finals)
    kept_report(tmp_path / "reports", "ab.md", suite, capsys)
    edited = yaml.safe_load(suite.read_text())
    edited["arms"]["b"]["set"].append("eval.every=7")
    suite.write_text(yaml.safe_dump(edited))
    assert not any("runs differ at" in line for line in index_lines(tmp_path / "reports", capsys))
    edited["arms"]["a"]["set"] = ["training.lr=0.5"]
    suite.write_text(yaml.safe_dump(edited))
    lines = index_lines(tmp_path / "reports", capsys)
    assert "- [ab.md](ab.md): 3 of 6 runs differ at training.lr" in lines
    assert lines[2].startswith("| [ab.md](ab.md) | a beats b | 0,1,2 | a > b (linear_top1) | +3.00 [+0.52, +5.48]")
