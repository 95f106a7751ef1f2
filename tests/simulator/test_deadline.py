"""``--until``: the deadline's two spellings, and the alarm that stops a block at it."""
import threading
import time
from datetime import datetime, timedelta

import pytest

from simulator.cli import main
from simulator.deadline import Deadline, stop_at
from simulator.run import Stopped, stop_signals
from simulator.scenario import ScenarioError

NOW = datetime(2026, 11, 28, 9, 40, 15)


@pytest.mark.parametrize("text, at", [
    ("10:20", datetime(2026, 11, 28, 10, 20)),         # later today
    ("9:41", datetime(2026, 11, 28, 9, 41)),
    ("09:40", datetime(2026, 11, 29, 9, 40)),          # passed a few seconds ago: tomorrow's
    ("02:05", datetime(2026, 11, 29, 2, 5)),           # after midnight
    ("23:59", datetime(2026, 11, 28, 23, 59)),
    ("+45m", NOW + timedelta(minutes=45)),
    ("+2h30m", NOW + timedelta(hours=2, minutes=30)),
    ("+1h5s", NOW + timedelta(hours=1, seconds=5)),
    ("+90s", NOW + timedelta(seconds=90)),
    ("+0s", NOW),
])
def test_a_clock_time_is_its_next_occurrence_and_a_duration_counts_from_now(text, at):
    assert Deadline.parse(text, NOW).at == at


def test_a_clock_time_the_clock_shows_this_very_second_is_tomorrows():
    """At 09:40:00.000 sharp, ``09:40`` has come already: its next occurrence is a day later, not now."""
    now = datetime(2026, 11, 28, 9, 40)
    assert Deadline.parse("09:40", now).at == datetime(2026, 11, 29, 9, 40)
    assert Deadline.parse("09:41", now).at == datetime(2026, 11, 28, 9, 41)


@pytest.fixture
def berlin(monkeypatch):
    """The local time zone of Berlin (POSIX rules, no tz database needed): clocks go from 02:00 to
    03:00 on 2026-03-29."""
    monkeypatch.setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("text, hours_left", [("06:00", 4.5), ("+2h", 2.0), ("01:45", 1.25)])
def test_a_deadline_across_a_dst_change_is_counted_in_real_time(berlin, text, hours_left):
    """00:30 on the night the clocks go forward: 06:00 is 4.5 hours away, not 5.5; ``+2h`` is two real
    hours (03:30 by the clock, which skips 02:00-03:00); before the change nothing moves."""
    now = datetime(2026, 3, 29, 0, 30)
    deadline = Deadline.parse(text, now)
    assert deadline.seconds_left(now.timestamp()) == hours_left * 3600
    if text == "+2h":
        assert deadline.at == datetime(2026, 3, 29, 3, 30)


@pytest.mark.parametrize("text", ["24:00", "10:60", "10:5", "1020", "+", "+h", "45m", "+45", "+1m2h", "+-5m", "",
                                  "tomorrow"])
def test_anything_else_is_one_line_naming_both_spellings(text):
    with pytest.raises(ScenarioError) as err:
        Deadline.parse(text, NOW)
    message = str(err.value)
    assert message == (f"fedssl claim: --until: expected a clock time HH:MM (its next occurrence) or +DURATION "
                       f"such as +45m or +2h30m, got {text!r}")


def test_a_bad_deadline_is_exit_2_before_the_suite_is_read(tmp_path, capsys):
    assert main(["claim", str(tmp_path / "absent.yaml"), "--until", "25:00"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedssl: error: fedssl claim: --until: expected a clock time")
    assert list(tmp_path.iterdir()) == []


def test_the_alarm_stops_the_block_at_the_deadline_and_not_before(capfd):
    alarm = stop_at(Deadline(datetime.now() + timedelta(seconds=0.5)))
    start = time.monotonic()
    with pytest.raises(Stopped) as stopped, stop_signals(), alarm:
        time.sleep(0.3)
        assert not alarm.fired
        time.sleep(30)
    assert alarm.fired and stopped.value.signal_name == "SIGTERM"
    assert 0.5 <= time.monotonic() - start < 10
    assert f"fedssl: the deadline {alarm.deadline} has come" in capfd.readouterr().err


def test_no_deadline_never_fires_and_a_left_block_cancels_its_alarm():
    with stop_signals(), stop_at(None) as never:
        time.sleep(0.2)
    assert not never.fired and never.timer is None
    with stop_signals(), stop_at(Deadline(datetime.now() + timedelta(seconds=0.3))) as left:
        pass
    time.sleep(0.6)  # a SIGTERM now would find Python's default action and end the test process
    assert not left.fired and not left.timer.is_alive()


def test_a_left_block_cancels_its_daemon_timer_at_once():
    """An hour-away alarm: its timer thread is a daemon (it never holds the interpreter's exit) and
    leaving the block cancels it then, not when the hour is up."""
    with stop_signals(), stop_at(Deadline(datetime.now() + timedelta(hours=1))) as alarm:
        assert alarm.timer.daemon and alarm.timer.is_alive() and not alarm.timer.finished.is_set()
    assert alarm.timer.finished.is_set()
    alarm.timer.join(timeout=60)  # a cancelled timer's thread ends; an uncancelled one would wait out the hour
    assert not alarm.timer.is_alive() and not alarm.fired


def test_a_deadline_that_comes_after_the_block_sends_nothing(monkeypatch):
    """The timer may go off as the block ends: then it stops nothing (a SIGTERM after the block would
    find the default action and end the process without its table)."""
    import simulator.deadline
    sent = []
    monkeypatch.setattr(simulator.deadline.os, "kill", lambda pid, sig: sent.append(sig))
    with stop_signals(), stop_at(Deadline(datetime.now() + timedelta(hours=1))) as alarm:
        pass
    alarm.fire()  # as a timer thread already past its wait would
    assert sent == [] and not alarm.fired
    with pytest.raises(Stopped), stop_signals(), stop_at(Deadline(datetime.now() + timedelta(hours=1))) as alarm:
        monkeypatch.undo()
        alarm.fire()
        time.sleep(30)
    assert alarm.fired


@pytest.mark.parametrize("text", ["+99999999h", "+99999999999h", "+999999999999999999999s"])
def test_a_duration_past_the_calendar_is_one_line(text, tmp_path, capsys):
    with pytest.raises(ScenarioError, match=r"^fedssl claim: --until: expected a duration that ends before the "
                                            r"year 10000, got "):
        Deadline.parse(text, NOW)
    assert main(["claim", str(tmp_path / "absent.yaml"), "--until", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedssl: error: fedssl claim: --until: expected a duration"), err


@pytest.mark.parametrize("text", ["+2600000h", "+2562048h", "+2562047h48m"])
def test_a_duration_longer_than_the_platforms_timers_wait_is_one_line(text, tmp_path, capsys):
    """Past ``threading.TIMEOUT_MAX`` seconds (about 292 years on Linux) the alarm's timer thread fails."""
    hours = int(threading.TIMEOUT_MAX // 3600)
    with pytest.raises(ScenarioError) as err:
        Deadline.parse(text, NOW)
    assert str(err.value) == (f"fedssl claim: --until: expected a duration of at most {hours} hours (the longest "
                              f"wait this platform's timers take), got {text!r}")
    assert main(["claim", str(tmp_path / "absent.yaml"), "--until", text]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {err.value}\n"


def test_the_longest_duration_taken_starts_its_alarm(monkeypatch):
    failed = []
    monkeypatch.setattr(threading, "excepthook", failed.append)
    longest = f"+{int(threading.TIMEOUT_MAX // 3600)}h"
    with stop_signals(), stop_at(Deadline.parse(longest)) as alarm:
        time.sleep(0.2)
        assert alarm.timer.is_alive()
    alarm.timer.join(timeout=60)
    assert failed == [] and not alarm.fired
