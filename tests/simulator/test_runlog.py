"""A run's directory (``simulator.runlog``): atomic writes, the recorded scenario and summary, the
metrics log, checkpoints and the client-state snapshots, on small files written here."""
import os
import re
import shutil
import time
import zipfile
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from simulator import runlog
from simulator.scenario import ScenarioError


def test_runs_started_in_the_same_second_get_run_directories_of_their_own(tmp_path, monkeypatch):
    """The free name is taken by mkdir itself, not checked first: even when the check could not see
    the other run's directory (exists() stubbed to see nothing), each run gets its own."""
    monkeypatch.setattr(runlog, "datetime", type("Frozen", (), {"now": staticmethod(lambda: datetime(2026, 1, 2, 3, 4, 5))}))
    monkeypatch.setattr(Path, "exists", lambda self: False)
    scenario = {"name": "same", "output": {"dir": str(tmp_path / "runs")}}
    first, second = runlog.new_run_dir(None, scenario), runlog.new_run_dir(None, scenario)
    assert first.name == "same-20260102-030405" and second.name == "same-20260102-030405-1"


def test_an_output_dir_under_home_is_made_there_not_in_a_folder_named_tilde(tmp_path, monkeypatch):
    """``output.dir: ~/runs`` (the check before the run expands it): the run lands in the home folder's
    ``runs``, not in ``./~/runs`` under the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    run_dir = runlog.new_run_dir(None, {"name": "x", "output": {"dir": "~/runs"}})
    assert run_dir.parent == tmp_path / "home" / "runs" and not (tmp_path / "~").exists()


def test_a_third_run_in_the_same_second_takes_the_next_free_suffix(tmp_path, monkeypatch):
    """``-1`` taken too: the third run is ``-2`` (each name tried once; mkdir calls are counted so that
    a name tried again and again fails here instead of spinning)."""
    frozen = type("Frozen", (), {"now": staticmethod(lambda: datetime(2026, 1, 2, 3, 4, 5))})
    monkeypatch.setattr(runlog, "datetime", frozen)
    scenario = {"name": "same", "output": {"dir": str(tmp_path / "runs")}}
    (tmp_path / "runs" / "same-20260102-030405-1").mkdir(parents=True)
    (tmp_path / "runs" / "same-20260102-030405").mkdir()
    calls = []
    mkdir = Path.mkdir

    def counted(self, *args, **kwargs):
        calls.append(self.name)
        if len(calls) > 10:
            raise RuntimeError(f"mkdir tried {calls}")
        return mkdir(self, *args, **kwargs)
    monkeypatch.setattr(Path, "mkdir", counted)
    assert runlog.new_run_dir(None, scenario).name == "same-20260102-030405-2"
    assert calls == ["runs", "same-20260102-030405", "same-20260102-030405-1", "same-20260102-030405-2"]


def test_atomic_write_replaces_the_file_whole_or_not_at_all_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")

    def half_then_fail(p):
        p.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        runlog.atomic_write(path, half_then_fail)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]
    runlog.atomic_write(path, lambda p: p.write_text("new"))
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["summary.json"]


def test_flat_hparams_dots_nested_keys_and_writes_lists_and_null_as_json():
    scenario = {"seed": 3, "training": {"lr": 0.05, "schedule": {"warmup": True}},
                "ray": {"worker_pools": [], "cpus": [1, {"gpu": 0.5}]}, "dataset": {"name": "x", "root": None}}
    assert runlog.flat_hparams(scenario) == {
        "seed": 3, "training.lr": 0.05, "training.schedule.warmup": True, "ray.worker_pools": "[]",
        "ray.cpus": '[1, {"gpu": 0.5}]', "dataset.name": "x", "dataset.root": "null"}


def test_a_run_directory_given_as_out_records_the_scenario_as_given(tmp_path):
    scenario = {"name": "tiny", "seed": 3, "training": {"rounds": 2, "lr": 0.05}, "dataset": {"root": None}}
    with pytest.raises(ScenarioError, match="not a run directory"):
        runlog.check_run_dir(tmp_path)
    run_dir = runlog.new_run_dir(str(tmp_path / "runs" / "one"), scenario)
    assert run_dir == tmp_path / "runs" / "one"
    runlog.check_run_dir(run_dir)
    recorded = runlog.read_recorded_scenario(run_dir)
    assert recorded == scenario and list(recorded) == list(scenario)  # in the scenario's order
    assert os.listdir(run_dir) == ["scenario.yaml"]


def test_an_out_that_holds_files_or_lies_under_a_file_is_refused(tmp_path):
    runlog.check_out(tmp_path / "new" / "run")  # not there yet
    runlog.check_out(tmp_path)  # there, empty
    (tmp_path / "notes.txt").write_text("data")
    with pytest.raises(FileExistsError, match="output directory is not empty; choose another --sweep-out"):
        runlog.check_out(tmp_path, "--sweep-out")
    with pytest.raises(FileExistsError, match="output directory is not empty"):
        runlog.new_run_dir(str(tmp_path), {"name": "x", "seed": 1})
    assert os.listdir(tmp_path) == ["notes.txt"]
    with pytest.raises(FileExistsError, match=re.escape(f"lies under the file {tmp_path / 'notes.txt'}; "
                                                        f"expected a directory for --dir")):
        runlog.check_directory_path(tmp_path / "notes.txt" / "a" / "b", "--dir")
    (tmp_path / "link").symlink_to(tmp_path / "gone" / "run")  # mkdir would fail on it after Ray started
    with pytest.raises(FileExistsError, match="link: is a symbolic link to a missing path; expected a directory for --out"):
        runlog.check_out(tmp_path / "link")


def test_an_out_the_user_cannot_write_in_or_too_long_a_name_is_refused_before_anything_is_written(
        tmp_path, monkeypatch):
    """These were tracebacks (PermissionError, OSError: File name too long) once the run had begun. Root
    may write anywhere, so the user's permission is what ``os.access`` answers, here a read-only one."""
    (tmp_path / "read-only").mkdir()
    real_access = os.access
    monkeypatch.setattr(runlog.os, "access", lambda path, mode: (Path(path).name != "read-only"
                                                                 and real_access(path, mode)))
    with pytest.raises(FileExistsError) as err:
        runlog.check_out(tmp_path / "read-only" / "new" / "run")
    assert str(err.value) == (f"{tmp_path / 'read-only' / 'new' / 'run'}: lies under {tmp_path / 'read-only'}, "
                              f"which is a directory this user cannot write in; expected a directory fedssl can "
                              f"create files in, for --out")
    with pytest.raises(FileExistsError, match=r"read-only: is a directory this user cannot write in; expected"):
        runlog.check_directory_path(tmp_path / "read-only", "output.dir")
    with pytest.raises(FileExistsError) as err:
        runlog.check_out(tmp_path / ("n" * 256) / "run")
    assert str(err.value) == ("--out: a name of 256 bytes (nnnnnnnnnnnnnnnnnnnn...); expected at most 255, the "
                              "longest file name file systems take")
    runlog.check_out(tmp_path / ("n" * 255))  # the longest name is fine
    assert sorted(os.listdir(tmp_path)) == ["read-only"]


class WritesAFile:
    """A pickle that, once loaded in full, creates ``path``: what a crafted checkpoint could run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_checkpoint_carrying_code_is_refused_without_running_it(tmp_path):
    """``state.pt`` was a full pickle: loading a crafted one (``fedssl evaluate``, ``--resume`` of a run
    someone else wrote) ran its code. It is now read as tensors and plain data only."""
    checkpoint, ran = tmp_path / "checkpoints" / "round_00001", tmp_path / "ran"
    checkpoint.mkdir(parents=True)
    torch.save({"round": 1, "state": {"w": torch.zeros(2)}, "extra": WritesAFile(ran)}, checkpoint / "state.pt")
    with pytest.raises(ScenarioError) as err:
        runlog.read_checkpoint(checkpoint)
    assert str(err.value) == (f"{checkpoint / 'state.pt'}: -: cannot be read (it holds objects other than tensors "
                              f"and plain data, which fedssl never loads); expected a checkpoint written by fedssl run")
    assert not ran.exists()
    torch.save({"round": 1, "state": {"w": torch.zeros(2)}, "numbers": [1, 2.5, "x", None]}, checkpoint / "state.pt")
    assert runlog.read_checkpoint(checkpoint)["numbers"] == [1, 2.5, "x", None]


def test_a_run_directory_the_system_refuses_to_create_is_one_line():
    """/proc takes no new directories, whoever asks (the checks before see a directory root may write in)."""
    for out, option in (("/proc/fedssl-run", "--out"), (None, "output.dir")):
        with pytest.raises(FileExistsError) as err:
            runlog.new_run_dir(out, {"name": "x", "seed": 1, "output": {"dir": "/proc/fedssl-runs"}})
        assert re.fullmatch(r"/proc/fedssl-runs?[^:]*: cannot create the directory \(No such file or directory\); "
                            rf"expected a directory fedssl can create files in, for {option}", str(err.value))


@pytest.mark.parametrize("recorded", [
    ["name", "seed"], {"seed": 3}, {"name": "x", "seed": "3"}, {"name": "x", "seed": 3.0}, {"name": "x", "seed": True},
], ids=["a-list", "no-name", "seed-a-string", "seed-a-float", "seed-a-boolean"])
def test_a_recorded_scenario_without_a_name_and_an_integer_seed_is_refused(tmp_path, recorded):
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(recorded))
    with pytest.raises(ScenarioError, match=f"{re.escape(str(tmp_path / 'scenario.yaml'))}: -: expected the resolved scenario"):
        runlog.read_recorded_scenario(tmp_path)


def test_the_summary_reads_back_and_a_damaged_one_is_an_error_naming_it(tmp_path):
    summary = {"rounds": 2, "eval": {"knn_top1": 0.5}, "stopped": None}
    runlog.write_summary(tmp_path, summary)
    assert runlog.read_summary(tmp_path) == summary
    assert (tmp_path / "summary.json").read_text().endswith("}\n")
    path = tmp_path / "summary.json"
    for damaged, message in ((b'{"rounds": 2', "not valid JSON"), (b"\xff\xfe{}", "not valid JSON"),
                             (b"[1, 2]", "expected a JSON object .* got list")):
        path.write_bytes(damaged)
        with pytest.raises(ScenarioError, match=f"{re.escape(str(path))}: -: {message}"):
            runlog.read_summary(tmp_path)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        runlog.read_summary(tmp_path)
    path.mkdir()  # a directory of its name: one line naming it, not the raw errno text
    with pytest.raises(ScenarioError, match=f"{re.escape(str(path))}: -: cannot read the file \\(Is a directory\\)"):
        runlog.read_summary(tmp_path)


def test_the_metrics_log_writes_rows_by_round_and_name_and_resumes_from_a_checkpoints_rows(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer
    # the writers' per-process counter at 9, 10, 11: within one second their files sort "10", "11", "9"
    monkeypatch.setattr(event_file_writer._global_uid, "_value", 9)
    log = runlog.RunLog(tmp_path, time.time())
    log.flush()  # nothing logged yet: an empty table of the schema
    assert pq.read_table(tmp_path / "metrics.parquet").schema.equals(runlog.RunLog.SCHEMA)
    for step in range(3):
        log.log(step, {"x": step, "a": 10 + step})
    log.close()
    rows = [r[:3] for r in log.rows]
    assert rows == [(0, "a", 10.0), (0, "x", 0.0), (1, "a", 11.0), (1, "x", 1.0), (2, "a", 12.0), (2, "x", 2.0)]
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert table.schema.equals(runlog.RunLog.SCHEMA)
    assert [(r["round"], r["name"], r["value"]) for r in table.to_pylist()] == rows

    # a resume from the checkpoint of round 1: round 2 again, then 3; TensorBoard drops the first round 2
    resumed = runlog.RunLog(tmp_path, time.time(), rows=log.rows[:4], purge_step=2)
    resumed.log(2, {"x": 20})
    resumed.log(3, {"x": 30})
    resumed.rewind(resumed.rows[:5], purge_step=3)  # back to round 2's end (a fault in round 3)
    resumed.log(3, {"x": 31})
    resumed.close()
    table = pq.read_table(tmp_path / "metrics.parquet").to_pylist()
    assert [(r["round"], r["name"], r["value"]) for r in table] == rows[:4] + [(2, "x", 20.0), (3, "x", 31.0)]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("x")] == [(0, 0.0), (1, 1.0), (2, 20.0), (3, 31.0)]
    assert [e.step for e in events.Scalars("a")] == [0, 1]
    files = sorted(p.name for p in (tmp_path / "tensorboard").iterdir())
    assert [name.rsplit(".", 1)[1] for name in files] == ["9", "10", "11"]  # name order is writing order


def test_a_new_event_file_waits_for_a_later_second_than_the_newest_file_there(tmp_path, monkeypatch):
    slept, real_sleep = [], time.sleep

    def sleep(seconds):
        slept.append(seconds)
        assert seconds <= 2.01, f"a wait of {seconds} s"
        real_sleep(seconds)

    monkeypatch.setattr(runlog.time, "sleep", sleep)
    directory = tmp_path / "tensorboard"
    directory.mkdir()
    runlog.open_event_writer(directory, None).close()  # an empty folder: no wait
    assert slept == []
    for path in directory.iterdir():
        path.unlink()
    ahead = int(time.time()) + 1  # the newest file a second ahead (another process's, a clock slightly ahead)
    (directory / f"events.out.tfevents.{ahead}.host.1.0").write_bytes(b"")
    runlog.open_event_writer(directory, 1).close()
    assert slept and all(s > 0 for s in slept)
    assert int(max(directory.iterdir()).name.split(".")[3]) > ahead  # written after it, so read after it
    slept.clear()
    (directory / f"events.out.tfevents.{int(time.time()) + 3600}.host.1.0").write_bytes(b"")
    runlog.open_event_writer(directory, 2).close()  # a clock an hour ahead: waiting would not mend it
    assert slept == []


def test_the_metrics_read_back_and_a_damaged_table_is_an_error_naming_the_file(tmp_path):
    import pyarrow as pa
    log = runlog.RunLog(tmp_path, time.time())
    log.log(0, {"eval/knn_top1": 0.5})
    log.close()
    path = tmp_path / "metrics.parquet"
    assert runlog.read_metrics(path) == [{"round": 0, "name": "eval/knn_top1", "value": 0.5}]
    # integer values and large strings are a table of the same shape
    pq.write_table(pa.table({"round": [0], "name": pa.array(["x"], pa.large_string()), "value": [3]}), path)
    assert runlog.read_metrics(path) == [{"round": 0, "name": "x", "value": 3}]
    expected = "expected the metrics table fedssl run writes (columns round, name, value)"

    def damaged_footer():  # pyarrow raises a plain OSError of several lines here: its first line is kept
        pq.write_table(pa.table({"round": [0, 1], "name": ["x", "y"], "value": [0.5, 1.0]}), path)
        data = bytearray(path.read_bytes())
        data[-40:-8] = bytes(b ^ 0xFF for b in data[-40:-8])
        path.write_bytes(bytes(data))
    for write, message in [
            (lambda: pq.write_table(pa.table({"a": [1]}), path), f"round: {expected}; found the columns a (int64)"),
            (lambda: pq.write_table(pa.table({"round": [0], "name": [1.5], "value": [0.5]}), path),
             f"name: {expected}; found the columns round (int64), name (double), value (double)"),
            (lambda: pq.write_table(pa.table({"round": [0, 1], "name": ["x", None], "value": [0.5, 1]}), path),
             f"name: {expected}; 1 of its 2 cells are empty"),
            (lambda: path.write_text("round,name,value\n"), "-: cannot be read as Parquet (Parquet magic bytes not "
                                                          "found in footer. Either the file is corrupted or this is "
                                                          f"not a parquet file.); {expected}"),
            (damaged_footer, "-: cannot be read as Parquet (Couldn't deserialize thrift: Variable-length int over 10 "
                             f"bytes.); {expected}"),
            (lambda: (path.unlink(), path.mkdir()), f"-: not a file; {expected}"),
            (lambda: path.rmdir(), f"-: no such file; {expected}")]:
        write()
        with pytest.raises(ScenarioError) as err:
            runlog.read_metrics(path)
        assert str(err.value) == f"{path}: {message}"


def test_a_metrics_table_whose_rounds_are_not_integers_is_refused(tmp_path):
    import pyarrow as pa
    path = tmp_path / "metrics.parquet"
    pq.write_table(pa.table({"round": [0.0, 1.5], "name": ["x", "x"], "value": [0.5, 1.0]}), path)
    with pytest.raises(ScenarioError) as err:
        runlog.read_metrics(path)
    assert str(err.value) == (f"{path}: round: expected the metrics table fedssl run writes (columns round, name, "
                              f"value); found the columns round (double), name (string), value (double)")


def test_only_the_newest_checkpoints_are_kept_and_the_latest_is_found(tmp_path):
    assert runlog.latest_checkpoint(tmp_path) is None
    for round_index in (1, 2, 3, 3):  # round 3 written twice: the second replaces the first
        runlog.write_checkpoint(tmp_path, round_index, {"state": f"of round {round_index}"}, keep=2)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["round_00002", "round_00003"]
    latest = runlog.latest_checkpoint(tmp_path)
    assert latest == tmp_path / "checkpoints" / "round_00003"
    assert runlog.read_checkpoint(latest) == {"round": 3, "state": "of round 3"}
    (tmp_path / "checkpoints" / "round_00004").mkdir()  # no state.pt: not a checkpoint
    assert runlog.latest_checkpoint(tmp_path) == latest


def test_the_newest_two_checkpoints_are_kept_by_default_and_each_names_its_round(tmp_path):
    for round_index in (5, 10, 15):
        runlog.write_checkpoint(tmp_path, round_index, {"state": round_index})
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["round_00010", "round_00015"]
    assert runlog.checkpoint_round(runlog.latest_checkpoint(tmp_path)) == 15
    assert runlog.checkpoint_round(tmp_path / "checkpoints" / "round_00010") == 10
    for round_index in (99999, 100000, 100001):  # past five digits the names sort before the older ones
        runlog.write_checkpoint(tmp_path, round_index, {"state": round_index})
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["round_100000", "round_100001"]
    assert runlog.checkpoint_round(runlog.latest_checkpoint(tmp_path)) == 100001
    shutil.rmtree(tmp_path / "checkpoints" / "round_100001")
    runlog.write_checkpoint(tmp_path, 99999, {"state": 99999})
    assert runlog.checkpoint_round(runlog.latest_checkpoint(tmp_path)) == 100000


def test_only_client_state_files_go_into_a_checkpoint_and_back_into_the_store(tmp_path):
    """A store directory holds its clients' files and a ``staged`` directory; another ``.pt`` file there
    (or in a checkpoint's snapshot) is no client's state and is neither snapshot nor restored."""
    store = tmp_path / "store"
    (store / "staged").mkdir(parents=True)
    torch.save({"client": 1}, store / "client_000001.pt")
    torch.save({"client": 2}, store / "staged" / "client_000002.pt")  # staged, not committed
    torch.save({"other": True}, store / "other.pt")
    runlog.write_checkpoint(tmp_path, 3, {"state": None}, client_state_dir=store)
    checkpoint = runlog.latest_checkpoint(tmp_path)
    assert os.listdir(checkpoint / "client_state") == ["client_000001.pt"]
    torch.save({"stray": True}, checkpoint / "client_state" / "stray.pt")
    runlog.restore_client_states(checkpoint, store)
    assert os.listdir(store) == ["client_000001.pt"]


def test_a_checkpoints_client_states_outlive_the_stores_replacements_and_are_restored(tmp_path):
    store = tmp_path / "client_state"
    store.mkdir()
    for client_id in (1, 5):
        torch.save({"client": client_id}, store / f"client_{client_id:06d}.pt")
    runlog.write_checkpoint(tmp_path, 2, {"state": None}, client_state_dir=store)
    checkpoint = runlog.latest_checkpoint(tmp_path)
    # the store replaces a file (os.replace), and a client not in the checkpoint stores its state
    torch.save({"client": 5, "later": True}, store / "new.pt")
    os.replace(store / "new.pt", store / "client_000005.pt")
    torch.save({"client": 7}, store / "client_000007.pt")
    assert runlog.read_client_state(checkpoint, 5) == {"client": 5}
    assert runlog.read_client_state(checkpoint, 7) is None
    runlog.restore_client_states(checkpoint, store)
    assert sorted(os.listdir(store)) == ["client_000001.pt", "client_000005.pt"]
    assert torch.load(store / "client_000005.pt") == {"client": 5}


def test_a_checkpoints_client_states_are_checked_whole_without_unpickling(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    for cid in (1, 2):
        torch.save({"weights": torch.arange(5000.0) * cid}, store / f"client_{cid:06d}.pt")
    runlog.write_checkpoint(tmp_path, 1, {"state": 0}, client_state_dir=store)
    checkpoint = runlog.latest_checkpoint(tmp_path)
    runlog.check_client_states(checkpoint)  # whole: nothing raised
    client = checkpoint / "client_state" / "client_000002.pt"
    whole = client.read_bytes()
    middle = whole.index(torch.arange(5000.0).mul(2).numpy().tobytes()[4000:4008])  # inside the tensor's bytes
    flipped = whole[:middle] + bytes([whole[middle] ^ 1]) + whole[middle + 1:]
    client.unlink()  # a hard link to the store's file: replace it, not write through it
    for damaged, reason in ((whole[:len(whole) // 2], "File is not a zip file"), (b"", "File is not a zip file"),
                            (flipped, "its member client_000002/data/0 fails its CRC")):
        client.write_bytes(damaged)
        with pytest.raises(ScenarioError) as err:
            runlog.check_client_states(checkpoint)
        assert str(err.value) == (f"{client}: -: cannot be read ({reason}); expected a client state written by "
                                  f"fedssl run"), str(err.value)
        client.unlink()


def test_a_damaged_checkpoint_or_client_state_is_an_error_naming_the_file(tmp_path):
    runlog.write_checkpoint(tmp_path, 1, {"state": 0}, client_state_dir=tmp_path / "no store")
    checkpoint = runlog.latest_checkpoint(tmp_path)
    state = checkpoint / "state.pt"
    # cut off, empty, not torch's, a pickle naming a module that does not exist
    for damaged in (state.read_bytes()[:100], b"", b"\x80\x02garbage", b"\x80\x02cno_such_module\nThing\nq\x00."):
        state.write_bytes(damaged)
        with pytest.raises(ScenarioError, match=f"{re.escape(str(state))}: -: cannot be read .*; expected a checkpoint written"):
            runlog.read_checkpoint(checkpoint)
    torch.save({"round": 1}, state)  # no state
    with pytest.raises(ScenarioError, match=f"{re.escape(str(state))}: -: expected a checkpoint written by fedssl run"):
        runlog.read_checkpoint(checkpoint)
    (checkpoint / "client_state").mkdir()
    client = checkpoint / "client_state" / "client_000003.pt"
    client.write_bytes(b"")
    with pytest.raises(ScenarioError, match=f"{re.escape(str(client))}: -: cannot be read .*; expected a client state"):
        runlog.read_client_state(checkpoint, 3)
    state.unlink()
    with pytest.raises(FileNotFoundError):
        runlog.read_checkpoint(checkpoint)


def test_a_state_mismatch_names_the_first_tensor_of_another_shape_and_compares_only_tensors_both_hold():
    expected = {"weights": {"a": torch.zeros(2, 3), "b": torch.zeros(4)}, "rows": [torch.zeros(1), None], "only": 1}
    assert runlog.state_mismatch(expected, expected) is None
    found = {"weights": {"a": torch.zeros(2, 3), "b": torch.zeros(5)}, "rows": [torch.zeros(1), torch.zeros(7)]}
    assert runlog.state_mismatch(expected, found) == ("state.weights.b", "expected a tensor of shape [4], got [5]")
    found["weights"]["b"] = torch.zeros(4)  # a tensor where the initial state has none is filled in as it runs
    assert runlog.state_mismatch(expected, found) is None
    found["rows"][0] = torch.zeros(2)
    assert runlog.state_mismatch(expected, found) == ("state.rows[0]", "expected a tensor of shape [1], got [2]")


def test_a_file_being_written_is_not_seen_under_its_name_pattern_nor_in_another_directory(tmp_path):
    """The temporary is a hidden sibling: the globs that gather a run's files (the client-state store's
    ``client_*.pt``, the checkpoints' ``round_*``) never take a file still being written, or left by a
    killed write, and the rename stays within one file system."""
    path = tmp_path / "client_000001.pt"
    path.write_bytes(b"old")
    seen = []

    def write(p):
        p.write_bytes(b"new")
        seen.append((p.parent, sorted(tmp_path.glob("client_*.pt")), sorted(tmp_path.glob("*.pt"))))
    runlog.atomic_write(path, write)
    assert seen == [(tmp_path, [path], [path])] and path.read_bytes() == b"new"


def test_a_name_too_long_in_bytes_is_refused_though_short_in_characters(tmp_path):
    """The limit is the file system's, in bytes: 128 two-byte characters are 256 bytes, too long."""
    with pytest.raises(FileExistsError, match=r"--out: a name of 256 bytes \(é{20}\.\.\.\); expected at most 255"):
        runlog.check_out(tmp_path / ("é" * 128))
    runlog.check_out(tmp_path / ("é" * 127 + "n"))  # 255 bytes


def test_a_run_started_before_the_trace_digest_was_written_resumes_unchecked(tmp_path):
    """A run directory without ``availability_trace.sha256`` (older runs) or a scenario without a trace
    passes; with the digest, the same trace passes and another is refused."""
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n0,0\n")
    scenario = {"population": {"availability_trace": str(trace)}}
    runlog.check_trace_unchanged(tmp_path, scenario)  # no digest recorded
    runlog.check_trace_unchanged(tmp_path, {"population": {"availability_trace": None}})
    (tmp_path / runlog.TRACE_DIGEST).write_text(runlog.trace_digest(str(trace)) + "\n")
    runlog.check_trace_unchanged(tmp_path, scenario)
    trace.write_text("round,client\n0,1\n")
    with pytest.raises(ScenarioError, match="is not the trace the run started with"):
        runlog.check_trace_unchanged(tmp_path, scenario)


def test_the_metrics_wall_seconds_count_from_the_runs_start(tmp_path):
    """``wall_seconds``: the time since the run's start (``start``; a resumed run's is moved back by the
    time its sessions took before), not a clock reading."""
    before = time.time()
    log = runlog.RunLog(tmp_path, before - 100.0)
    log.log(1, {"x": 1.0})
    log.close()
    after = time.time()
    [wall] = pq.read_table(tmp_path / "metrics.parquet").column("wall_seconds").to_pylist()
    assert 100.0 <= wall <= 100.0 + (after - before)


def test_a_metrics_table_or_summary_whose_write_fails_midway_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    """A write cut off (a full disk, a killed process) never leaves a torn ``metrics.parquet`` or
    ``summary.json``: the previous file stays as it was."""
    log = runlog.RunLog(tmp_path, time.time())
    log.log(1, {"x": 1.0})
    log.flush()
    runlog.write_summary(tmp_path, {"rounds": 1})
    metrics, summary = (tmp_path / "metrics.parquet").read_bytes(), (tmp_path / "summary.json").read_bytes()
    write_table = pq.write_table

    def half_a_table(table, where):
        write_table(table, where)
        Path(where).write_bytes(Path(where).read_bytes()[:40])
        raise OSError("disk full")

    def half_a_text(self, text, *args, **kwargs):
        with open(self, "w") as file:
            file.write(text[:5])
        raise OSError("disk full")
    monkeypatch.setattr(runlog.pq, "write_table", half_a_table)
    monkeypatch.setattr(Path, "write_text", half_a_text)
    log.log(2, {"x": 2.0})
    with pytest.raises(OSError, match="disk full"):
        log.flush()
    with pytest.raises(OSError, match="disk full"):
        runlog.write_summary(tmp_path, {"rounds": 2})
    assert (tmp_path / "metrics.parquet").read_bytes() == metrics and (tmp_path / "summary.json").read_bytes() == summary
    log.writer.close()


def test_a_checkpoint_without_its_round_is_refused(tmp_path):
    checkpoint = tmp_path / "round_00001"
    checkpoint.mkdir()
    torch.save({"state": {"w": torch.zeros(2)}}, checkpoint / "state.pt")
    with pytest.raises(ScenarioError, match=f"{re.escape(str(checkpoint / 'state.pt'))}: -: expected a checkpoint "
                                            f"written by fedssl run \\(round and state\\)"):
        runlog.read_checkpoint(checkpoint)


def test_a_state_mismatch_compares_shapes_not_sizes():
    """A tensor of the same number of elements in another shape (a layer's widths swapped) is a mismatch."""
    assert runlog.state_mismatch({"w": torch.zeros(2, 3)}, {"w": torch.zeros(3, 2)}) == (
        "state.w", "expected a tensor of shape [2, 3], got [3, 2]")


def test_a_checkpoint_write_killed_before_its_rename_leaves_the_previous_checkpoint_the_latest(tmp_path, monkeypatch):
    """A run stopped at once while it writes a checkpoint (a second Ctrl-C, a kill) leaves its temporary
    directory, never a checkpoint: the newest whole one is still found, and the next write of the same
    process (a resume whose process has the same id, as in a container) succeeds and rotates as before."""
    store = tmp_path / "store"
    store.mkdir()
    torch.save({"client": 1}, store / "client_000001.pt")
    runlog.write_checkpoint(tmp_path, 2, {"state": 2}, client_state_dir=store)

    def killed(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(runlog.os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        runlog.write_checkpoint(tmp_path, 4, {"state": 4}, client_state_dir=store)
    monkeypatch.undo()
    assert runlog.latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "round_00002"
    for round_index in (4, 6):
        runlog.write_checkpoint(tmp_path, round_index, {"state": round_index}, client_state_dir=store)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("round_*")) == ["round_00004", "round_00006"]
    assert runlog.read_checkpoint(runlog.latest_checkpoint(tmp_path))["state"] == 6


def test_a_write_removes_the_temporary_directory_another_process_left(tmp_path):
    """A checkpoint write killed before its rename (its process gone: a resume runs under another id)
    leaves a hidden temporary holding a whole state.pt; the run's next write removes it."""
    runlog.write_checkpoint(tmp_path, 2, {"state": 2})
    leftover = tmp_path / "checkpoints" / f".round_00004.tmp-{os.getpid() + 1}"
    leftover.mkdir()
    torch.save({"round": 4, "state": 4}, leftover / "state.pt")
    runlog.write_checkpoint(tmp_path, 4, {"state": 4})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["round_00002", "round_00004"]


def test_a_checkpoint_whose_tensor_bytes_changed_is_refused_not_resumed_from(tmp_path):
    """torch.load checks no CRC: a flipped byte inside a tensor of state.pt loaded as another weight and
    a resume went on from it. The archive is checked whole first: one line naming the file and member."""
    weights = torch.arange(5000.0)
    runlog.write_checkpoint(tmp_path, 1, {"state": {"w": weights}})
    state = runlog.latest_checkpoint(tmp_path) / "state.pt"
    whole = state.read_bytes()
    middle = whole.index(weights.numpy().tobytes()[4000:4008])
    state.write_bytes(whole[:middle] + bytes([whole[middle] ^ 1]) + whole[middle + 1:])
    with pytest.raises(ScenarioError) as err:
        runlog.read_checkpoint(state.parent)
    assert str(err.value) == (f"{state}: -: cannot be read (its member state/data/0 fails its CRC); expected "
                              f"a checkpoint written by fedssl run")


def test_the_first_damaged_client_state_is_named_by_client(tmp_path):
    """Of several damaged client states, the one of the lowest client id is named, whatever the listing order."""
    (tmp_path / "client_state").mkdir()
    for cid in (3, 1, 2):
        (tmp_path / "client_state" / f"client_{cid:06d}.pt").write_bytes(b"")
    with pytest.raises(ScenarioError, match=re.escape(str(tmp_path / "client_state" / "client_000001.pt"))):
        runlog.check_client_states(tmp_path)


def test_a_client_state_is_read_as_the_full_pickle_its_method_kept(tmp_path):
    """Client states are whatever a method keeps (not only tensors): ``fedssl evaluate`` reads a
    checkpoint's as the store does."""
    import numpy as np
    (tmp_path / "client_state").mkdir()
    torch.save({"weights": torch.ones(2), "stats": np.arange(3)}, tmp_path / "client_state" / "client_000004.pt")
    state = runlog.read_client_state(tmp_path, 4)
    assert state["weights"].tolist() == [1.0, 1.0] and state["stats"].tolist() == [0, 1, 2]


def test_a_client_state_damaged_in_its_archive_directory_is_an_error_naming_it_not_a_traceback(tmp_path):
    """Damage in the zip's directory fails in other ways than a bad CRC: a garbled compression method
    (NotImplementedError), bytes lost in the middle, which moves every offset (OSError: Invalid argument).
    ``fedssl run --resume`` checks the files before anything starts: one line naming the file."""
    import struct
    (tmp_path / "client_state").mkdir()
    client = tmp_path / "client_state" / "client_000001.pt"
    torch.save({"weights": torch.arange(500.0)}, client)
    whole = client.read_bytes()
    directory = whole.index(b"PK\x01\x02")  # the first entry of the archive's central directory
    method = whole[:directory + 10] + struct.pack("<H", 99) + whole[directory + 12:]
    for damaged, reason in ((method, "That compression method is not supported"),
                            (whole[:1500] + whole[1600:], "[Errno 22] Invalid argument")):
        client.write_bytes(damaged)
        with pytest.raises(ScenarioError) as err:
            runlog.check_client_states(tmp_path)
        assert str(err.value) == (f"{client}: -: cannot be read ({reason}); expected a client state written by "
                                  f"fedssl run")


def test_a_client_state_whose_zip64_directory_torch_refuses_is_named_before_the_run_not_by_a_worker(tmp_path):
    """Python's zip reader passes over a ZIP64 end record's disk number and entry count, which torch's
    reader refuses ("unsupported multidisk archive", "too many files"): such a file passed the CRC check
    and stopped a resumed run when a worker first read it. Both readers now check it first."""
    (tmp_path / "client_state").mkdir()
    client = tmp_path / "client_state" / "client_000002.pt"
    torch.save({"weights": torch.arange(500.0)}, client)
    whole = client.read_bytes()
    record = whole.rindex(b"PK\x06\x06")  # the ZIP64 end of central directory record
    for field, reason in ((16, "unsupported multidisk archive"), (28, "too many files")):
        damaged = bytearray(whole)
        damaged[record + field] ^= 1
        client.write_bytes(bytes(damaged))
        with zipfile.ZipFile(client) as archive:
            assert archive.testzip() is None  # Python's reader: whole
        with pytest.raises(ScenarioError) as err:
            runlog.check_client_states(tmp_path)
        assert str(err.value) == (f"{client}: -: cannot be read (PytorchStreamReader failed reading zip archive: "
                                  f"{reason}); expected a client state written by fedssl run")
    client.write_bytes(whole)
    runlog.check_client_states(tmp_path)  # whole again: nothing raised


def test_metric_values_read_back_bit_for_bit(tmp_path):
    """``metrics.parquet`` keeps each value as the float64 logged: runs compared bitwise (a resume, a
    healed run against the fault-free one) compare these."""
    values = {"a": 0.1 + 0.2, "b": 1 / 3, "c": 1e-300, "d": 123456789.123456789, "e": 7}
    log = runlog.RunLog(tmp_path, time.time())
    log.log(1, values)
    log.close()
    assert {row["name"]: row["value"] for row in runlog.read_metrics(tmp_path / "metrics.parquet")} == values


def test_a_scenario_write_that_fails_midway_leaves_no_scenario_file(tmp_path, monkeypatch):
    """``scenario.yaml`` marks a run directory (check_run_dir): a write cut off leaves none, never a torn one."""
    def half_a_text(self, text, *args, **kwargs):
        with open(self, "w") as file:
            file.write(text[:5])
        raise OSError("disk full")
    monkeypatch.setattr(Path, "write_text", half_a_text)
    with pytest.raises(OSError, match="disk full"):
        runlog.new_run_dir(str(tmp_path / "run"), {"name": "x", "seed": 1})
    assert os.listdir(tmp_path / "run") == []
