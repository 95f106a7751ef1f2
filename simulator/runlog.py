"""A run's directory: resolved scenario, metrics (Parquet + TensorBoard), summary, checkpoints.

Every file but TensorBoard's event files is written atomically (temporary sibling, then
``os.replace``), so a reader or a killed run never sees a half-written one; the event files are
appended as TensorBoard's writer does (a resumed run purges the steps after its checkpoint).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import time
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def flat_hparams(node: dict[str, Any], prefix: str = "") -> dict[str, str | float | int | bool]:
    """A nested scenario as one level of dotted keys with TensorBoard HParams values: numbers,
    booleans and strings as they are, lists as JSON, null as ``"null"``."""
    flat: dict[str, str | float | int | bool] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            flat.update(flat_hparams(value, f"{prefix}{key}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix + key] = value
        else:
            flat[prefix + key] = json.dumps(value)
    return flat


def check_existing_directory(path: Path, what: str) -> None:
    """``ValueError`` unless ``path`` is a directory: ``PATH: is a file; expected a WHAT`` or ``PATH: no such
    WHAT`` (``what``: e.g. ``run directory``, ``directory of runs``)."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: is a file; expected a {what}")
    if not path.is_dir():
        raise ValueError(f"{path}: no such {what}")


def check_run_dir(run_dir: str | Path) -> None:
    """``ScenarioError`` unless ``run_dir`` holds a run's ``scenario.yaml`` (written first of its files)."""
    from simulator.scenario import ScenarioError
    if not (Path(run_dir) / "scenario.yaml").exists():
        raise ScenarioError(str(run_dir), "-", "not a run directory (no scenario.yaml); expected a directory "
                                               "written by fedssl run")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's ``summary.json``; ``ScenarioError`` naming the file where it is not the JSON object that
    :func:`write_summary` writes (``FileNotFoundError`` where there is none)."""
    from simulator.scenario import ScenarioError
    path = run_dir / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except OSError as err:  # e.g. a directory of that name
        raise ScenarioError(str(path), "-", f"cannot read the file ({err.strerror}); expected the summary that "
                                            f"fedssl run writes") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ScenarioError(str(path), "-", f"not valid JSON ({err}); expected the summary that fedssl run "
                                            f"writes") from None
    if not isinstance(summary, dict):
        raise ScenarioError(str(path), "-", f"expected a JSON object (the summary fedssl run writes), got "
                                            f"{type(summary).__name__}")
    return summary


def read_recorded_scenario(run_dir: Path) -> dict[str, Any]:
    """A run's ``scenario.yaml`` as recorded (not resolved again); ``ScenarioError`` naming the file
    where it is not a YAML mapping with a ``name`` and an integer ``seed``."""
    from simulator.scenario import ScenarioError, read_yaml
    path = run_dir / "scenario.yaml"
    recorded = read_yaml(path)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("name"), str) \
            or type(recorded.get("seed")) is not int:  # an int, not a bool
        raise ScenarioError(str(path), "-", "expected the resolved scenario fedssl run writes (a mapping with "
                                            "name and seed)")
    return recorded


def load_recorded_scenario(run_dir: Path, overrides: list[str] = ()) -> dict[str, Any]:
    """A run's scenario resolved to run or evaluate it again (resume, ``fedssl evaluate``), after
    :func:`read_recorded_scenario`'s check: a damaged file lacking its seed is an error, never the
    default seed's run continued from the checkpoint of another."""
    from simulator.scenario import load_scenario
    read_recorded_scenario(run_dir)
    return load_scenario(run_dir / "scenario.yaml", list(overrides))


def check_directory_path(path: str | Path, option: str) -> None:
    """Raise ``FileExistsError`` if ``path`` (given as ``option``) cannot be a directory fedssl writes in:
    it, or the nearest of its parents that exists, is a file or a directory this user cannot write in,
    or a name it would create is longer than the file system allows."""
    check_name_lengths(Path(path).parts, option)  # first: stat fails on a name the file system does not take
    if Path(path).is_symlink() and not Path(path).exists():
        raise FileExistsError(f"{path}: is a symbolic link to a missing path; expected a directory for {option}")
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == Path(path) else f"lies under the file {existing}"
        raise FileExistsError(f"{path}: {where}; expected a directory for {option}")
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == Path(path) else f"lies under {existing}, which "
        raise FileExistsError(f"{path}: {where}is a directory this user cannot write in; expected a directory "
                              f"fedssl can create files in, for {option}")


LONGEST_NAME = 255  # bytes: the longest file name of Linux's common file systems (ext4, xfs, btrfs, tmpfs)


def check_name_lengths(names: tuple[str, ...], option: str) -> None:
    """Raise ``FileExistsError`` if one of ``names`` (a path's parts) is longer than a file name can be."""
    for name in names:
        if len(os.fsencode(name)) > LONGEST_NAME:
            raise FileExistsError(f"{option}: a name of {len(os.fsencode(name))} bytes ({name[:20]}...); "
                                  f"expected at most {LONGEST_NAME}, the longest file name file systems take")


def check_out(out: str | Path, option: str = "--out") -> None:
    """Raise ``FileExistsError`` if ``out`` cannot be a new run's directory: it holds files already (a
    run never writes into such a directory), or it or a parent is a file."""
    check_directory_path(out, option)
    if Path(out).exists() and any(Path(out).iterdir()):
        raise FileExistsError(f"{out}: output directory is not empty; choose another {option}")


def new_run_dir(out: str | None, scenario: dict) -> Path:
    """``out`` if given (it must not hold files), else ``<output.dir>/<name>-<timestamp>``; a directory
    the system refuses to create (``/proc/x``, whatever the checks before saw) raises ``FileExistsError``
    with one line."""
    try:
        if out is None:  # the first free name, taken by mkdir itself: two runs started at once get two
            base = Path(scenario["output"]["dir"]).expanduser() / f"{scenario['name']}-{datetime.now():%Y%m%d-%H%M%S}"
            base.parent.mkdir(parents=True, exist_ok=True)
            run_dir, n = base, 1
            while True:
                try:
                    run_dir.mkdir()
                    break
                except FileExistsError:
                    run_dir, n = base.with_name(f"{base.name}-{n}"), n + 1
        else:
            check_out(out)
            run_dir = Path(out)
            run_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise
    except OSError as err:
        raise FileExistsError(f"{err.filename}: cannot create the directory ({err.strerror}); expected a directory "
                              f"fedssl can create files in, for {'--out' if out else 'output.dir'}") from None
    atomic_write(run_dir / "scenario.yaml",
                 lambda p: p.write_text(yaml.safe_dump(scenario, sort_keys=False)))
    trace = scenario.get("population", {}).get("availability_trace")
    if trace is not None:
        digest = trace_digest(trace)
        atomic_write(run_dir / TRACE_DIGEST, lambda p: p.write_text(f"{digest}\n"))
    return run_dir


TRACE_DIGEST = "availability_trace.sha256"


def trace_digest(path: str) -> str:
    """The SHA-256 of an availability trace file's bytes."""
    return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()


def check_trace_unchanged(run_dir: Path, scenario: dict) -> None:
    """``ScenarioError`` where the availability trace a run names is not the file it started with (its
    digest, :data:`TRACE_DIGEST`, written beside ``scenario.yaml``): the scenario records the trace's
    path only, so a file edited since, or a relative path resolved from another directory, would
    resume the run on another trace. Runs started before the digest was written are not checked."""
    from simulator.scenario import ScenarioError
    trace, recorded = scenario["population"]["availability_trace"], Path(run_dir) / TRACE_DIGEST
    if trace is None or not recorded.exists():
        return
    started, now = recorded.read_text().strip(), trace_digest(trace)
    if now != started:
        raise ScenarioError(str(Path(run_dir) / "scenario.yaml"), "population.availability_trace",
                            f"{trace} is not the trace the run started with (SHA-256 {started[:12]}..., now "
                            f"{now[:12]}...); expected that file as it was, to resume the run")


def open_event_writer(directory: Path, purge_step: int | None):
    """A TensorBoard writer whose event file sorts after every file already in ``directory``.

    TensorBoard reads a directory's event files in name order, and a purge only drops what was read
    before it. The name is ``events.out.tfevents.<second>.<host>.<pid>.<counter>``: the zero-padded
    second orders files of different seconds, but within one second the per-process counter compares
    as text ("10" before "9"), and another process's pid in any order; a resume or a rewind in the
    same second as the file it follows could be read first and its purge lost. So the new file waits
    for a later second than the newest one there (at most a second, only then; a file stamped further
    ahead came from a clock that runs ahead, which waiting would not mend in reasonable time)."""
    from torch.utils.tensorboard import SummaryWriter
    stamps = [path.name.split(".")[3] for path in directory.glob("events.out.tfevents.*")]
    newest = max((int(stamp) for stamp in stamps if stamp.isdigit()), default=-1)
    if newest - int(time.time()) <= 1:
        while int(time.time()) <= newest:
            time.sleep(max(0.0, newest + 1 - time.time()) + 0.001)
    return SummaryWriter(str(directory), purge_step=purge_step)


class RunLog:
    """Long-format metrics (round, name, value, wall time) to Parquet and TensorBoard."""

    SCHEMA = pa.schema([("round", pa.int32()), ("name", pa.string()), ("value", pa.float64()),
                        ("wall_seconds", pa.float64())])

    def __init__(self, run_dir: Path, start: float, rows: list | None = None, purge_step: int | None = None):
        """``rows`` and ``purge_step`` resume a log: events at or after ``purge_step`` are dropped."""
        self.run_dir = run_dir
        self.start = start
        self.rows: list[tuple[int, str, float, float]] = list(rows or [])
        self.writer = open_event_writer(run_dir / "tensorboard", purge_step)

    # TensorBoard's custom-scalars dashboard: each chart gathers the tags its regular expressions match
    LAYOUT = {
        "accuracy": {"kNN (backbone)": [r"eval/(.+/)?knn_top1.*"], "linear probe": [r"eval/(.+/)?linear_top1.*"],
                     "fine-tuning": [r"eval/(.+/)?finetune_top1.*"],
                     "kNN (projector)": [r"eval/(.+/)?knn_projector_top1.*"]},
        "loss": {"training loss": [r"train/.*loss.*"]},
        "population": {"clients": [r"clients/.*"], "round time": [r"time/.*"]},
        "communication": {"bytes up": [r"bytes_up/.*"], "bytes down": [r"bytes_down/.*"]},
    }

    def log_scenario(self, scenario: dict[str, Any], metric_tags: list[str]) -> None:
        """The run's resolved scenario as TensorBoard HParams (each key flattened, e.g.
        ``training.lr``; lists as JSON), with ``metric_tags`` as the table's metrics, and the
        custom-scalars layout. Written once, when a run starts."""
        from torch.utils.tensorboard.summary import custom_scalars, hparams
        for summary in hparams(flat_hparams(scenario), {tag: float("nan") for tag in metric_tags}):
            self.writer.file_writer.add_summary(summary)
        layout = {category: {chart: ["Multiline", tags] for chart, tags in charts.items()}
                  for category, charts in self.LAYOUT.items()}
        self.writer.file_writer.add_summary(custom_scalars(layout))

    def rewind(self, rows: list, purge_step: int) -> None:
        """Back to a checkpoint's ``rows``: TensorBoard drops the events from ``purge_step`` on."""
        self.writer.close()
        self.rows = list(rows)
        self.writer = open_event_writer(self.run_dir / "tensorboard", purge_step)

    def log(self, round_index: int, metrics: dict[str, float]) -> None:
        wall = time.time() - self.start
        for name, value in sorted(metrics.items()):
            self.rows.append((round_index, name, float(value), wall))
            self.writer.add_scalar(name, value, round_index)

    def flush(self) -> None:
        self.writer.flush()
        columns = list(zip(*self.rows)) if self.rows else [[], [], [], []]
        table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, self.SCHEMA)],
                                     schema=self.SCHEMA)
        atomic_write(self.run_dir / "metrics.parquet", lambda p: pq.write_table(table, p))

    def close(self) -> None:
        self.flush()
        self.writer.close()


METRICS_COLUMNS = {"round": pa.types.is_integer, "name": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
                   "value": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t)}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows ``{round, name, value}`` of a run's ``metrics.parquet`` (:meth:`RunLog.flush`);
    ``ScenarioError`` naming the file where there is none, it is not a file, it cannot be read as
    Parquet, or lacks one of those columns (of integers, names, numbers) or has an empty cell in one."""
    from simulator.scenario import ScenarioError
    expected = "expected the metrics table fedssl run writes (columns round, name, value)"
    if not path.is_file():
        raise ScenarioError(str(path), "-", f"{'not a file' if path.exists() else 'no such file'}; {expected}")
    try:
        table = pq.ParquetFile(path).read()
    except (pa.ArrowException, OSError) as err:  # pyarrow's text runs over several lines: its first is kept
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ScenarioError(str(path), "-", f"cannot be read as Parquet ({reason}); {expected}") from None
    for column, fits in METRICS_COLUMNS.items():
        if table.schema.get_field_index(column) < 0 or not fits(table.schema.field(column).type):
            found = ", ".join(f"{field.name} ({field.type})" for field in table.schema) or "none"
            raise ScenarioError(str(path), column, f"{expected}; found the columns {found}")
        if table.column(column).null_count:
            raise ScenarioError(str(path), column, f"{expected}; {table.column(column).null_count} of its "
                                                   f"{table.num_rows} cells are empty")
    return table.select(list(METRICS_COLUMNS)).to_pylist()


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    atomic_write(run_dir / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))


def load_written(path: Path, what: str, weights_only: bool = True) -> Any:
    """``torch.load`` of a file ``fedssl run`` wrote (``what`` it is); ``ScenarioError`` naming the file
    where it cannot be read as one (``OSError`` where it cannot be read at all). ``weights_only``: tensors
    and plain data only, so a crafted file runs no code (a checkpoint's ``state.pt``); a client state is
    whatever its method keeps (:mod:`simulator.client_store`), a full pickle: resume only runs you trust."""
    from simulator.scenario import ScenarioError
    try:
        return torch.load(path, weights_only=weights_only)
    except OSError:
        raise
    except Exception as err:  # a damaged pickle fails in many ways (RuntimeError, EOFError, ImportError, ...)
        raise ScenarioError(str(path), "-", f"cannot be read ({unreadable(err)}); expected {what} written by "
                                            f"fedssl run") from None


def unreadable(err: Exception) -> str:
    """Why ``torch.load`` could not read a file, on one line."""
    if isinstance(err, pickle.UnpicklingError):  # torch's weights-only reader: an object it does not load
        return "it holds objects other than tensors and plain data, which fedssl never loads"
    line = " ".join(str(err).split("\n")[0].split())
    return line.split(". This is an internal miniz error.")[0] or type(err).__name__  # torch's advice dropped


def read_client_state(checkpoint: Path, client_id: int) -> Any:
    """Client ``client_id``'s state in ``checkpoint`` (None where it has none), read as
    :func:`load_written` reads."""
    path = checkpoint / "client_state" / f"client_{client_id:06d}.pt"
    return load_written(path, "a client state", weights_only=False) if path.exists() else None


def check_client_states(checkpoint: Path) -> None:
    """Raises ``ScenarioError`` naming the first client-state file of ``checkpoint`` that is not whole:
    ``torch.save`` writes a zip archive, whose every member's CRC is checked here without unpickling
    (workers read the files later, one client at a time, where a damaged one would be a traceback)."""
    from simulator.scenario import ScenarioError
    for path in sorted((checkpoint / "client_state").glob("client_*.pt")):
        if (reason := archive_damage(path)) is not None:
            raise ScenarioError(str(path), "-", f"cannot be read ({reason}); expected a client state written by "
                                                f"fedssl run")


def archive_damage(path: Path) -> str | None:
    """Why the zip archive that ``torch.save`` wrote at ``path`` is not whole, on one line (a member
    failing its CRC; a cut, overwritten or garbled archive), else None. ``torch.load`` checks no CRC:
    a flipped byte inside a tensor loads as another number. Python's reader checks the CRCs, and
    torch's own reader (miniz) then opens the archive as ``torch.load`` will: it refuses directory
    fields that Python's passes over (a ZIP64 record's disk number or entry count), which would
    otherwise stop a resumed run only when a worker first read the file. Of 3,000 random one-bit flips
    in a 10 kB client state, 297 passed the CRCs, torch's reader refused 35 of them, and the other 262
    loaded the same content (the flips fell where no reader looks: padding, unused header fields)."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        if damaged is None:
            with open(path, "rb") as stream:
                torch._C.PyTorchFileReader(stream)  # torch.load's reader, without reading a record
    except Exception as err:  # truncated, overwritten, not an archive; a garbled method or version
        return unreadable(err)  # (NotImplementedError), offset (OSError: Invalid argument), ...
    return None if damaged is None else f"its member {' '.join(damaged.split())} fails its CRC"


def read_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """The driver's payload in ``checkpoint/state.pt`` (:func:`write_checkpoint`), its archive checked
    whole first (:func:`archive_damage`), read as :func:`load_written` reads."""
    from simulator.scenario import ScenarioError
    path = checkpoint / "state.pt"
    if path.is_file() and (reason := archive_damage(path)) is not None:
        raise ScenarioError(str(path), "-", f"cannot be read ({reason}); expected a checkpoint written by fedssl run")
    payload = load_written(path, "a checkpoint")
    if not isinstance(payload, dict) or not {"round", "state"} <= set(payload):
        raise ScenarioError(str(path), "-", "expected a checkpoint written by fedssl run (round and state)")
    return payload


def state_mismatch(expected: Any, found: Any, key: str = "state") -> tuple[str, str] | None:
    """(key, what differs) of the first tensor of a checkpoint's ``found`` state whose shape is not that of
    the same key's tensor in ``expected`` (a method's initial state for the scenario), or None. Entries only
    one side holds, or not as tensors on both, are not compared (a method fills some in as it runs)."""
    if isinstance(expected, torch.Tensor) and isinstance(found, torch.Tensor):
        if expected.shape != found.shape:
            return key, f"expected a tensor of shape {list(expected.shape)}, got {list(found.shape)}"
        return None
    if isinstance(expected, dict) and isinstance(found, dict):
        pairs = ((f"{key}.{k}", expected[k], found[k]) for k in expected if k in found)
    elif isinstance(expected, (list, tuple)) and isinstance(found, (list, tuple)):
        pairs = ((f"{key}[{i}]", e, f) for i, (e, f) in enumerate(zip(expected, found)))
    else:
        return None
    return next(filter(None, (state_mismatch(e, f, k) for k, e, f in pairs)), None)


def write_checkpoint(run_dir: Path, round_index: int, payload: dict[str, Any],
                     client_state_dir: Path | None = None, keep: int = 2) -> None:
    """``checkpoints/round_NNNNN/``: ``state.pt`` (the driver's payload) and a snapshot of the
    client-state store (hard links: the store replaces files, so linked versions stay intact).
    Built in a temporary directory and renamed into place; only the newest ``keep`` are kept."""
    directory = run_dir / "checkpoints"
    directory.mkdir(exist_ok=True)
    final = directory / f"round_{round_index:05d}"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    for leftover in directory.glob(".round_*.tmp-*"):  # of a write killed before its rename, by any process
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir()
    torch.save({"round": round_index, **payload}, tmp / "state.pt")
    if client_state_dir is not None and client_state_dir.exists():
        (tmp / "client_state").mkdir()
        for path in client_state_dir.glob("client_*.pt"):
            os.link(path, tmp / "client_state" / path.name)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    for old in sorted(directory.glob("round_*"), key=checkpoint_round)[:-keep]:
        shutil.rmtree(old)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the latest round (by number: past round 99999 the names grow a digit)."""
    found = sorted((path.parent for path in (run_dir / "checkpoints").glob("round_*/state.pt")), key=checkpoint_round)
    return found[-1] if found else None


def checkpoint_round(checkpoint: Path) -> int:
    """The round a checkpoint directory (``round_00010``) holds the state after."""
    return int(checkpoint.name.removeprefix("round_"))


def restore_client_states(checkpoint: Path, client_state_dir: Path) -> None:
    """Make the client-state store what it was at the checkpoint."""
    shutil.rmtree(client_state_dir, ignore_errors=True)
    client_state_dir.mkdir(parents=True)
    for path in sorted((checkpoint / "client_state").glob("client_*.pt")):
        os.link(path, client_state_dir / path.name)
