"""``fedssl claim --until``: a time at which a batch of runs stops, resumable.

At the deadline the command's process is sent SIGTERM, so that everything :class:`simulator.run.stop_signals`
does for a cluster's preemption happens: a run under way ends its round, writes its checkpoint and
stops; between two runs the next one is not started. Run again, the claim resumes that run and runs
the rest.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from simulator.scenario import ScenarioError

CLOCK = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
DURATION = re.compile(r"\+(?=\d)(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


@dataclass(frozen=True)
class Deadline:
    at: datetime  # local wall-clock time (naive: read by the local time zone's rules, DST included)

    @classmethod
    def parse(cls, text: str, now: datetime | None = None) -> Deadline:
        """``HH:MM`` (the next time the local clock shows it, within 24 hours) or ``+DURATION``
        (``+45m``, ``+2h30m``, ``+90s``, from ``now``); raises :class:`ScenarioError` otherwise."""
        now = now or datetime.now()
        if clock := CLOCK.fullmatch(text):
            at = now.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
            return cls(at if at > now else at + timedelta(days=1))
        if (duration := DURATION.fullmatch(text)) and any(duration.groups()):
            hours, minutes, seconds = (int(part or 0) for part in duration.groups())
            try:
                elapsed = timedelta(hours=hours, minutes=minutes, seconds=seconds).total_seconds()
                at = datetime.fromtimestamp(now.timestamp() + elapsed)  # real time, across a DST change too
            except (OverflowError, ValueError, OSError):  # past the calendar's last day (year 9999)
                raise ScenarioError("fedssl claim", "--until", f"expected a duration that ends before the year "
                                                               f"10000, got {text!r}") from None
            if elapsed > threading.TIMEOUT_MAX:  # stop_at's timer could not wait that long (OverflowError)
                raise ScenarioError("fedssl claim", "--until", f"expected a duration of at most "
                                                               f"{int(threading.TIMEOUT_MAX // 3600)} hours (the "
                                                               f"longest wait this platform's timers take), "
                                                               f"got {text!r}")
            return cls(at)
        raise ScenarioError("fedssl claim", "--until", f"expected a clock time HH:MM (its next occurrence) or "
                                                       f"+DURATION such as +45m or +2h30m, got {text!r}")

    def seconds_left(self, now: float | None = None) -> float:
        """Seconds from ``now`` (a POSIX time; default: the present) to the deadline, as the time zone
        counts them: a clock time after a DST change is an hour nearer or farther than its wall-clock
        difference says."""
        return self.at.timestamp() - (time.time() if now is None else now)

    def __str__(self) -> str:
        return self.at.strftime("%Y-%m-%d %H:%M:%S")


class stop_at:
    """Within the block, SIGTERM reaches this process at ``deadline`` (``None``: never); ``fired``
    says whether it did. Meant inside :class:`simulator.run.stop_signals`, which turns it into a stop."""

    def __init__(self, deadline: Deadline | None):
        self.deadline = deadline
        self.fired = False
        self.timer: threading.Timer | None = None
        self.inside = False  # the block is running: a deadline that comes after it has nothing to stop
        self.lock = threading.Lock()  # the signal goes out inside the block, or not at all

    def __enter__(self):
        self.inside = True
        if self.deadline is not None:
            self.timer = threading.Timer(max(0.0, self.deadline.seconds_left()), self.fire)
            self.timer.daemon = True
            self.timer.start()
        return self

    def fire(self) -> None:
        with self.lock:
            if not self.inside:
                return
            self.fired = True
            os.write(2, f"\nfedssl: the deadline {self.deadline} has come\n".encode())
            os.kill(os.getpid(), signal.SIGTERM)

    def __exit__(self, *exc):
        with self.lock:
            self.inside = False
        if self.timer is not None:
            self.timer.cancel()
