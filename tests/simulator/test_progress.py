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


def test_durations_round_to_the_nearest_second_before_choosing_the_unit():
    """59.6 s is a minute and 3599.6 s an hour (rounded, not truncated: not 59s, not 59m59s)."""
    assert [duration(s) for s in (0.4, 0.6, 59.6, 184.7, 3599.6)] == ["0s", "1s", "1m00s", "3m05s", "1h00m"]


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


def test_a_resumed_run_s_line_counts_the_earlier_time_and_paces_on_its_own_rounds(capsys):
    """Resumed at round 7 of 10 after 600 s: 6 rounds were done before (not 7, or round 7 would
    have no pace and no ETA), elapsed starts at 10 min; round 7 takes 20 s here, 3 rounds are left."""
    progress = Progress(10, enabled=True, first_round=7, elapsed_before=600.0)
    clock = Clock()
    progress.pace.clock, progress.pace.started = clock, clock()  # Progress's own pace, on the fake clock
    clock.now += 20
    progress.show(7, {"train/loss": 0.5, "time/round_seconds": 20.0}, {})
    assert capsys.readouterr().err == "round 7/10  loss 0.5000  20.00 s/round  elapsed 10m20s  eta 1m00s\n"


def test_a_fresh_run_s_first_line_already_has_a_pace(capsys):
    """From round 1, nothing done before: round 1's 8 s give the ETA of the 3 rounds left."""
    progress = Progress(4, enabled=True)
    clock = Clock()
    progress.pace.clock, progress.pace.started = clock, clock()
    clock.now += 8
    progress.show(1, {"train/loss": 0.5, "time/round_seconds": 8.0}, {})
    assert capsys.readouterr().err == "round 1/4  loss 0.5000  8.00 s/round  elapsed 8s  eta 24s\n"


def test_on_a_terminal_the_line_is_rewritten_in_place_and_the_last_one_ends_the_line(capsys):
    """Each round's line overwrites the previous one (a carriage return, no newline), and the final
    round's line ends with a newline, so that what is printed next starts on a line of its own."""
    progress = Progress(2, enabled=True)
    progress.tty = True  # stderr as a terminal
    clock = Clock()
    progress.pace = Pace(2, clock=clock)
    for r in (1, 2):
        clock.now += 5
        progress.show(r, {"train/loss": 1.0, "time/round_seconds": 5.0}, {})
    assert capsys.readouterr().err == ("\rround 1/2  loss 1.0000  5.00 s/round  elapsed 5s  eta 5s"
                                       "\rround 2/2  loss 1.0000  5.00 s/round  elapsed 10s\n")


def test_a_run_without_progress_prints_nothing(capsys):
    """``--quiet`` (and sweeps, claims): no line at all."""
    Progress(2, enabled=False).show(1, {"train/loss": 1.0, "time/round_seconds": 5.0}, {"knn_top1": 0.5,
                                                                                        "linear_top1": 0.5}, 1)
    assert capsys.readouterr().err == ""


def test_an_hour_long_duration_never_shows_sixty_minutes():
    assert [duration(s) for s in (3659, 10770, 10799, 10800)] == ["1h00m", "2h59m", "2h59m", "3h00m"]
