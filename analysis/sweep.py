"""Scaling studies: run a scenario over a grid of values and tabulate and plot what it cost.

``fedssl sweep SCENARIO.yaml --over population.num_clients=10,50,100 [--over KEY=V1,V2 ...]`` runs
every combination one after another on the same Ray instance (local or ``ray.address: auto``) and
writes ``sweep.parquet``, ``sweep.md`` and one PNG per measure against the first swept key. A swept
key is a number column where all its values are numbers, else its values as written.

``--out`` keeps the command (``sweep.yaml``: the scenario file's path and text, ``--over``, ``--set``).
The same command again on that ``--out`` resumes the sweep, as ``fedssl claim`` resumes a claim: a
finished run is kept (never repeated), an interrupted one resumes from its newest checkpoint, the rest
run. Another command, or the scenario file edited since, is one error line: the table would mix sweeps.
"""
from __future__ import annotations

import itertools
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from simulator.progress import Pace
from simulator.runlog import atomic_write, check_name_lengths, check_out, read_recorded_scenario, read_summary
from simulator.scenario import ScenarioError, UnreadableYaml, load_scenario, overridden, parse_yaml

MEASURES = {
    "seconds_per_round": "wall time per round (s, steady state)",
    "samples_per_second": "throughput (samples/s, steady state)",
    "driver_peak_mb": "driver peak memory over the rounds (MiB)",
    "workers_peak_mb": "worker actors' peak memory (MiB, summed; the driver's own slot is in the driver's)",
    "bytes_per_round": "bytes per round (up + down)",
    "final_knn_top1": "final kNN top-1 (fraction)",
    "final_linear_top1": "final linear-probe top-1 (fraction)",
}


def grid(overs: list[str]) -> tuple[list[str], list[list[str]]]:
    """The swept keys and, per combination, its ``key=value`` overrides."""
    keys, values = [], []
    for over in overs:
        key, sep, listed = over.partition("=")
        items = split_values(listed)
        if not sep or not key or items is None or "" in items:
            raise ScenarioError("--over", over, "expected dotted.key=value1,value2,... (a list value in brackets, "
                                                "e.g. augment.crop_scale=[0.2,1.0],[0.35,1.0])")
        if key in keys:
            raise ScenarioError("--over", key, "swept twice; expected each key in one --over with all its values")
        for item in items:
            try:
                parse_yaml(item)
            except UnreadableYaml as err:  # a value of thousands of brackets or digits is not echoed twice
                problem = (f"the value {item} is not valid YAML" if len(item) <= 100
                           else f"a value is not valid YAML ({err.problem})")
                raise ScenarioError("--over", over,
                                    f"{problem}; expected e.g. 5, 0.1, true, [0.8,1.0] or a name") from None
        # one value written two ways (0.1 and 0.10, 1 and 1.0, 1 and " 1") ran the same point twice
        meant = [value_key(parse_yaml(item)) for item in items]
        repeated = [v for v in dict.fromkeys(meant) if meant.count(v) > 1]
        if repeated:
            spellings = list(dict.fromkeys(item for item, v in zip(items, meant) if v == repeated[0]))
            raise ScenarioError("--over", over, f"the value {spellings[0]} is given twice; expected each value once"
                                if len(spellings) == 1 else "the values " + " and ".join(f'"{s}"' for s in spellings)
                                + " are one value; expected each value once")
        keys.append(key)
        values.append(items)
    return keys, [[f"{k}={v}" for k, v in zip(keys, combo)] for combo in itertools.product(*values)]


def value_key(value: Any) -> str:
    """What a swept value means, the same however it is written: a finite number as an exact fraction
    (1 and 1.0 alike, 10**17 and 10**17 + 1 apart), a list or mapping by its items' (``[0.2,1.0]`` and
    ``[0.2,1]`` alike), anything else by its repr (True apart from 1)."""
    if isinstance(value, list):
        return "[" + ", ".join(map(value_key, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{value_key(k)}: {value_key(v)}" for k, v in value.items())) + "}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return repr(Fraction(value) if number else value)


def split_values(listed: str) -> list[str] | None:
    """``listed`` split at the commas outside brackets (``[0.2,1.0],[0.35,1.0]``: two list values);
    None where its brackets do not pair."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(listed):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            return None
        if char == "," and depth == 0:
            items.append(listed[start:i])
            start = i + 1
    return None if depth else [*items, listed[start:]]


def swept_values(keys: list[str], combos: list[list[str]]) -> list[dict[str, Any]]:
    """Per combination, its swept values as the table's columns: a key whose every value is a YAML
    number is a number column (integers where all are, else floats); any other key keeps its values
    as written (names, booleans, lists)."""
    columns = {}
    for i, key in enumerate(keys):
        written = [combo[i].split("=", 1)[1] for combo in combos]
        parsed = [parse_yaml(v) for v in written]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in parsed):
            columns[key] = parsed if all(isinstance(v, int) for v in parsed) else [float(v) for v in parsed]
        else:
            columns[key] = written
    return [{key: columns[key][j] for key in keys} for j in range(len(combos))]


def row_of(values: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """One table row: the combination's swept values, its costs, and its final accuracies beside its
    round-0 (random network) ones and the raw-pixel reference (``None`` where not evaluated)."""
    final, initial, pixels = summary["final"] or {}, summary.get("initial") or {}, summary.get("pixels") or {}
    row = dict(values)
    row.update({
        "seconds_per_round": summary["steady_seconds_per_round"],
        "samples_per_second": summary["steady_samples_per_second"],
        "driver_peak_mb": summary["driver_rss_mb_max"],
        "workers_peak_mb": summary["peak_memory_mb"]["workers"],
        "bytes_per_round": summary["bytes_per_round"],
        "final_knn_top1": final.get("knn_top1"), "final_linear_top1": final.get("linear_top1"),
        "round0_knn_top1": initial.get("knn_top1"), "round0_linear_top1": initial.get("linear_top1"),
        "pixels_knn_top1": pixels.get("knn_top1"), "pixels_linear_top1": pixels.get("linear_top1"),
        "rounds": summary["rounds_completed"], "seconds_to_end_of_round_1": summary["seconds_to_end_of_round_1"],
    })
    return row


SWEEP_RECORD = "sweep.yaml"


def sweep_record(scenario_file: str, overs: list[str], sets: list[str]) -> dict[str, Any]:
    """What makes a sweep: its scenario file (path and text), its ``--over`` and its ``--set``."""
    return {"scenario": str(scenario_file), "scenario_text": Path(scenario_file).read_text(),
            "over": list(overs), "set": list(sets)}


def resumes(out: Path, record: dict[str, Any]) -> bool:
    """Whether ``out`` holds this sweep (to resume): True where its ``sweep.yaml`` records ``record``;
    False where ``out`` can be a new sweep's (:func:`simulator.runlog.check_out`). Raises
    ``FileExistsError`` where it holds another sweep, or this one's scenario file as it was before an edit."""
    kept = out / SWEEP_RECORD
    if not kept.is_file():
        check_out(out)
        return False
    try:
        before = yaml.safe_load(kept.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        before = None
    if not isinstance(before, dict) or set(before) != set(record):
        raise FileExistsError(f"{kept}: damaged (expected the record fedssl sweep writes); expected an --out "
                              f"holding this sweep, to resume it, or a new one")
    if before["over"] != record["over"] or before["set"] != record["set"]:
        was = " ".join(f"--{name} {item}" for name in ("over", "set") for item in before[name])
        raise FileExistsError(f"{out}: holds another sweep ({before['scenario']} {was}); expected the same "
                              f"scenario, --over and --set to resume it, or a new --out")
    if before["scenario_text"] != record["scenario_text"]:  # the path may differ: the file's text is the sweep's
        raise FileExistsError(f"{out}: its sweep ran {before['scenario']} as it was before an edit, not "
                              f"{record['scenario']} as it is now; expected the file as it was, to resume the sweep, "
                              f"or a new --out")
    return True


def run_sweep(scenario_file: str, overs: list[str], sets: list[str], out: Path, progress: bool,
              check: Callable[[dict, str], None] | None = None,
              check_resume: Callable[[Path], None] | None = None) -> list[dict]:
    """Every combination's run, one after another, in ``out``. Before any is written, every combination
    is loaded and validated, then passed to ``check(scenario, source)`` (the CLI's checks before running);
    on an ``out`` holding this sweep (:func:`resumes`), every interrupted run is passed to
    ``check_resume(run_dir)`` (the CLI's checks before a resume), a finished run is kept and an
    interrupted one resumed."""
    from analysis.claims import differences, keys_text
    from simulator.run import run_scenario, stop_signals
    keys, combos = grid(overs)
    for item in sets:  # the swept value would replace the set one in every run, without a word
        if swept := [key for key in keys if overridden(key, item.partition("=")[0])]:
            raise ScenarioError("--set", item.partition("=")[0], f"is swept by --over {swept[0]} as well; expected "
                                                                 f"each key in --set or in --over, not both")
    # all valid before any runs
    scenarios = [load_scenario(scenario_file, [*sets, *combo], overrides_source="--set/--over") for combo in combos]
    if check is not None:
        for combo, scenario in zip(combos, scenarios):
            check(scenario, f"{scenario_file} ({', '.join(combo)})")
    record = sweep_record(scenario_file, overs, sets)
    resuming = resumes(out, record)
    check_name_lengths(tuple(run_dir_name(combo) for combo in combos), "--over")
    run_dirs = [out / run_dir_name(combo) for combo in combos]
    started = [d for d in run_dirs if (d / "scenario.yaml").exists()] if resuming else []
    columns = swept_values(keys, combos)
    kept: dict[Path, dict] = {}  # the finished runs' rows, read before anything runs
    for run_dir, scenario, values in zip(run_dirs, scenarios, columns):
        if run_dir not in started:
            continue
        if (run_dir / "summary.json").exists():
            kept[run_dir] = kept_row(run_dir, values)
        elif check_resume is not None:
            check_resume(run_dir)
        if different := differences(read_recorded_scenario(run_dir), scenario):  # the code's defaults changed
            print(f"note: {run_dir}: its scenario differs from the sweep's at {keys_text(different)} (the run is "
                  f"used as it is)", file=sys.stderr)
    if not resuming:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / SWEEP_RECORD, lambda p: p.write_text(yaml.safe_dump(record, sort_keys=False)))
    rows = []
    pace = Pace(len(combos))
    for i, (combo, values, scenario, run_dir) in enumerate(zip(combos, columns, scenarios, run_dirs), 1):
        stop_signals.raise_if_requested()  # a stop noted in the last run's last round: announce nothing more
        state = ("finished before: kept" if run_dir in kept else "resuming" if run_dir in started
                 else pace.text(i - 1))
        print(f"sweep: run {i}/{len(combos)} ({', '.join(combo)})  {state}", file=sys.stderr, flush=True)
        if run_dir in kept:
            rows.append(kept[run_dir])
        else:
            _, summary = (run_scenario(scenario, progress=progress, resume_dir=str(run_dir)) if run_dir in started
                          else run_scenario(scenario, str(run_dir), progress=progress))
            rows.append(row_of(values, summary))
        write_outputs(rows, keys, out)
    print(f"sweep: {len(combos)}/{len(combos)} runs done  {pace.text(len(combos))}", file=sys.stderr, flush=True)
    return rows


def kept_row(run_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
    """The table row of a finished run kept from before a resume; ``ScenarioError`` naming its
    ``summary.json`` where that lacks a measure."""
    summary = read_summary(run_dir)
    try:
        return row_of(values, summary)
    except (KeyError, TypeError) as err:
        raise ScenarioError(str(run_dir / "summary.json"), "-", f"lacks {err} (expected the summary that fedssl "
                                                                f"run writes)") from None


def run_dir_name(combo: list[str]) -> str:
    """The directory of one combination's run inside the sweep's ``--out``: its ``key=value`` items joined
    by commas, a ``/`` in a value written ``%2F`` (``%`` as ``%25``), so that every run stays in ``--out``
    (``output.dir=a/../../x`` wrote its run outside it)."""
    return ",".join(combo).replace("%", "%25").replace("/", "%2F")


def write_outputs(rows: list[dict], keys: list[str], out: Path) -> None:
    table = pa.Table.from_pylist(rows)
    atomic_write(out / "sweep.parquet", lambda p: pq.write_table(table, p))
    atomic_write(out / "sweep.md", lambda p: p.write_text(markdown(rows)))
    plot(rows, keys, out)


def markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows]
    return ("\n".join(lines) + "\n\nAccuracies (`*_top1`) are fractions of the test images (report's tables "
            "show points).\n")


def plot(rows: list[dict], keys: list[str], out: Path) -> None:
    """One PNG per measure that some run has: the measure against the first swept key, one line per
    other combination (a key of numbers on a number axis; any other, e.g. ``method.name``, by its
    values in sweep order)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x_key, series_keys = keys[0], keys[1:]
    x_values = list(dict.fromkeys(row[x_key] for row in rows))  # as the --over values were written

    def number(value) -> float | None:
        try:
            return float(value)
        except ValueError:
            return None
    numeric = all(number(v) is not None for v in x_values)
    position = number if numeric else (lambda v: float(x_values.index(v)))
    for measure, label in MEASURES.items():
        series: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            if row[measure] is None:
                continue
            name = ",".join(f"{k}={row[k]}" for k in series_keys) or measure
            series.setdefault(name, []).append((position(row[x_key]), float(row[measure])))
        if not series:  # no run measured it (no evaluation; one round: no steady state): no empty axes
            continue
        figure, axis = plt.subplots(figsize=(5, 3.5))
        for name, points in series.items():
            points.sort()
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axis.set_xlabel(x_key)
        if not numeric:
            axis.set_xticks(range(len(x_values)), [str(v) for v in x_values])
        axis.set_ylabel(label)
        if len(series) > 1:
            axis.legend(fontsize=7)
        figure.tight_layout()
        atomic_write(out / f"{measure}.png", lambda p: figure.savefig(p, format="png", dpi=100))
        plt.close(figure)
