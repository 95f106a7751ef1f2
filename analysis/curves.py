"""Learning curves of finished runs: a logged metric against the round, mean ± std over seeds.

``fedssl report RUN_DIR... --plot DIR [--metric NAME ...]`` writes ``DIR/curves.parquet`` (long
format: scenario, metric, round, mean, std, seeds) and one PNG per metric with one line per scenario
name and a band of ± one sample standard deviation over its seeds.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.report import sample_std
from simulator.runlog import atomic_write, read_metrics

DEFAULT_METRICS = ("eval/knn_top1", "eval/linear_top1", "train/loss")


def learning_curves(runs: list[dict], metrics: tuple[str, ...]) -> list[dict]:
    """Rows (scenario, metric, round, mean, std, seeds) over the runs of each scenario name, at the
    rounds where every one of its seeds logged the metric; ``runs`` as ``analysis.report.read_run``
    gives them. Raises ValueError for a metric that none of the runs logged."""
    tables = [(run["name"], read_metrics(Path(run["dir"]) / "metrics.parquet")) for run in runs]
    logged = {row["name"] for _, rows in tables for row in rows}
    # an evaluation metric may be named as report's tables and --margin name it (knn_top1: eval/knn_top1)
    metrics = tuple(f"eval/{m}" if m not in logged and f"eval/{m}" in logged else m for m in metrics)
    values: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    seeds: dict[str, int] = defaultdict(int)
    for name, rows in tables:
        seeds[name] += 1
        for row in rows:
            if row["name"] in metrics:
                values[(name, row["name"])][row["round"]].append(row["value"])
    missing = [m for m in metrics if not any(metric == m for _, metric in values)]
    if missing:
        raise ValueError(f"--metric {missing[0]}: no run logged it (names are those of metrics.parquet, "
                         f"e.g. {', '.join(DEFAULT_METRICS)})")
    return [{"scenario": name, "metric": metric, "round": r, "mean": statistics.mean(vs), "std": sample_std(vs),
             "seeds": len(vs)}
            for metric in metrics for name in seeds for r, vs in sorted(values[(name, metric)].items())
            if len(vs) == seeds[name]]


def write_curves(rows: list[dict], out: Path) -> list[Path]:
    """``curves.parquet`` and one PNG per metric in ``out``; returns the PNG paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "curves.parquet", lambda p: pq.write_table(pa.Table.from_pylist(rows), p))
    paths = []
    for metric in dict.fromkeys(row["metric"] for row in rows):
        figure, axis = plt.subplots(figsize=(5, 3.5))
        for name in dict.fromkeys(row["scenario"] for row in rows):
            points = [row for row in rows if row["scenario"] == name and row["metric"] == metric]
            if not points:
                continue
            x = [p["round"] for p in points]
            mean = [p["mean"] for p in points]
            axis.plot(x, mean, marker="." if len(points) < 50 else None, label=f"{name} ({points[0]['seeds']})")
            axis.fill_between(x, [m - p["std"] for m, p in zip(mean, points)],
                              [m + p["std"] for m, p in zip(mean, points)], alpha=0.2)
        axis.set_xlabel("round")
        axis.set_ylabel(f"{metric} (fraction)" if "_top1" in metric else metric)
        axis.legend(fontsize=7)
        figure.tight_layout()
        path = out / f"{metric.replace('/', '_')}.png"
        atomic_write(path, lambda p: figure.savefig(p, format="png", dpi=100))
        plt.close(figure)
        paths.append(path)
    return paths
