"""Progress lines on stderr: a run's per-round line and a sweep's per-run line, each with the time
elapsed and an estimate of the time left (ETA: the mean pace so far times what is left)."""
from __future__ import annotations

import sys
import time
from typing import Callable


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Pace:
    """Elapsed time and ETA over ``total`` steps, of which ``done_before`` were done (``elapsed_before``
    seconds) before this process started; the pace is measured on this process's own steps."""

    def __init__(self, total: int, done_before: int = 0, elapsed_before: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.done_before, self.elapsed_before, self.clock = total, done_before, elapsed_before, clock
        self.started = clock()

    def text(self, done: int) -> str:
        """``elapsed 3m05s  eta 1m10s`` after ``done`` steps in all."""
        spent = self.clock() - self.started
        line = f"elapsed {duration(self.elapsed_before + spent)}"
        done_here = done - self.done_before
        if 0 < done_here and done < self.total:
            line += f"  eta {duration(spent / done_here * (self.total - done))}"
        return line


class Progress:
    """A run's line per round on stderr (rewritten in place on a terminal): loss, round time,
    elapsed, ETA and the latest evaluation."""

    def __init__(self, total: int, enabled: bool, first_round: int = 1, elapsed_before: float = 0.0):
        self.total, self.enabled = total, enabled
        self.tty = sys.stderr.isatty()
        self.pace = Pace(total, max(0, first_round - 1), elapsed_before)

    def show(self, round_index: int, metrics: dict[str, float], last_eval: dict[str, float],
             eval_round: int | None = None) -> None:
        """``last_eval``: the newest evaluation, of round ``eval_round`` (named when not this round's)."""
        if not self.enabled:
            return
        loss = metrics.get("train/loss", float("nan"))
        line = (f"round {round_index}/{self.total}  loss {loss:.4f}  "
                f"{metrics.get('time/round_seconds', 0):.2f} s/round  {self.pace.text(max(round_index, 0))}")
        if last_eval:
            line += f"  knn {100 * last_eval['knn_top1']:.2f}%  linear {100 * last_eval['linear_top1']:.2f}%"
            if eval_round is not None and eval_round != round_index:
                line += f" (round {eval_round})"
        end = "" if self.tty and round_index < self.total else "\n"
        print(("\r" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)
