"""The run summary's figures from the logged rows (``simulator.run.traffic_and_speed``)."""
import pytest

from simulator.run import traffic_and_speed


def test_bytes_per_round_are_of_the_training_rounds_and_the_totals_of_every_round():
    # a setup round 0 in which every client shares (as FedSC's and Orchestra's), then rounds 1-2
    rows = [(0, "bytes_up/records", 1000.0, 0.0), (0, "bytes_down/weights", 5000.0, 0.0),
            (0, "time/round_seconds", 9.0, 0.0),
            (1, "bytes_up/weights", 100.0, 0.0), (1, "bytes_down/weights", 300.0, 0.0),
            (1, "time/round_seconds", 4.0, 0.0), (1, "train/samples", 40.0, 0.0),
            (1, "memory/driver_rss_mb", 700.0, 0.0),
            (2, "bytes_up/weights", 200.0, 0.0), (2, "bytes_down/weights", 400.0, 0.0),
            (2, "time/round_seconds", 2.0, 0.0), (2, "train/samples", 60.0, 0.0),
            (2, "memory/driver_rss_mb", 650.0, 0.0)]
    figures = traffic_and_speed(rows)
    assert figures["bytes_up"] == 1300.0 and figures["bytes_down"] == 5700.0
    assert figures["bytes_per_round"] == pytest.approx((100 + 300 + 200 + 400) / 2)
    # steady state: round 2 only (round 1 pays the start-up)
    assert figures["steady_seconds_per_round"] == 2.0 and figures["steady_samples_per_second"] == 30.0
    assert figures["driver_rss_mb_max"] == 700.0

