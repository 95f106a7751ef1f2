"""Progress lines: elapsed time and ETA from the pace so far (a fake clock)."""
from simulator.progress import Pace, Progress, duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_durations_read_as_a_person_would_write_them():
    assert [duration(s) for s in (0, 45.4, 60, 185, 3599, 3600, 7625)] == [
        "0s", "45s", "1m00s", "3m05s", "59m59s", "1h00m", "2h07m"]


def test_eta_is_the_pace_so_far_times_what_is_left():
    clock = Clock()
    pace = Pace(10, clock=clock)
    assert pace.text(0) == "elapsed 0s"  # no pace yet: no estimate
    clock.now += 30  # 2 steps in 30 s: 15 s a step, 8 left
    assert pace.text(2) == "elapsed 30s  eta 2m00s"
    clock.now += 120
    assert pace.text(10) == "elapsed 2m30s"  # finished: no estimate


def test_a_resumed_run_counts_its_earlier_time_but_paces_on_its_own_rounds():
    clock = Clock()
    pace = Pace(10, done_before=6, elapsed_before=600, clock=clock)  # 6 rounds took 10 min before
    clock.now += 20  # round 7 took 20 s here
    assert pace.text(7) == "elapsed 10m20s  eta 1m00s"


def test_the_round_line_carries_elapsed_and_eta(capsys):
    progress = Progress(4, enabled=True)
    clock = Clock()
    progress.pace = Pace(4, clock=clock)
    clock.now += 8
    progress.show(1, {"train/loss": 1.5, "time/round_seconds": 8.0}, {"knn_top1": 0.5, "linear_top1": 0.625}, 1)
    assert capsys.readouterr().err == (
        "round 1/4  loss 1.5000  8.00 s/round  elapsed 8s  eta 24s  knn 50.00%  linear 62.50%\n")
    clock.now += 8  # an evaluation of an earlier round says which (round 2 shows round 0's numbers)
    progress.show(2, {"train/loss": 1.5, "time/round_seconds": 8.0}, {"knn_top1": 0.5, "linear_top1": 0.625}, 0)
    assert capsys.readouterr().err == (
        "round 2/4  loss 1.5000  8.00 s/round  elapsed 16s  eta 16s  knn 50.00%  linear 62.50% (round 0)\n")
