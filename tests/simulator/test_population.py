"""Cohort plans: availability, dropout, deadlines, over-selection; deterministic in (seed, round)."""
import os

import numpy as np
import pytest

from simulator.population import AvailabilityTrace, CohortSchedule, Population
from simulator.scenario import DEFAULTS, ScenarioError, resolve


def population(num_clients=200, sizes=None, seed=0, **overrides):
    config = {**DEFAULTS["population"], "num_clients": num_clients, "clients_per_round": 20, **overrides}
    return Population(config, 1, tuple(sizes or [100] * num_clients), seed)


def totals(pop, rounds=300):
    plans = [pop.plan(r) for r in range(1, rounds + 1)]
    return {k: sum(p.counts()[k] for p in plans) for k in plans[0].counts()}


def test_default_population_everyone_online_and_reporting():
    plan = population().plan(3)
    assert len(plan.sampled) == 20 and plan.sampled == plan.completed
    assert plan.dropped == plan.late == ()
    assert population().plan(0).completed == tuple(range(200))  # setup round


def test_plan_is_deterministic_in_seed_and_round():
    assert population(seed=1).plan(5) == population(seed=1).plan(5)
    assert population(seed=1).plan(5) != population(seed=1).plan(6)
    assert population(seed=1).plan(5) != population(seed=2).plan(5)


def test_availability_and_dropout_rates_match_the_configured_probabilities():
    pop = population(availability=0.6, dropout=0.25)
    t = totals(pop)
    assert t["clients/online"] / (200 * 300) == pytest.approx(0.6, abs=0.02)
    # the cohort is sampled among the online clients: a full one every round (about 120 are online)
    assert t["clients/sampled"] == t["clients/available"] == 20 * 300
    for r in (1, 2, 3):
        assert set(pop.plan(r).sampled) <= set(pop.online_clients(r).tolist())
    assert t["clients/dropped"] / t["clients/sampled"] == pytest.approx(0.25, abs=0.02)
    assert t["clients/reporting"] == t["clients/sampled"] - t["clients/dropped"]


def test_a_round_with_fewer_online_clients_than_wanted_samples_them_all(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n" + "".join(f"0,{c}\n" for c in (3, 50, 51, 120, 199)))
    plan = population(availability_trace=str(trace), over_selection=0.5).plan(4)
    assert plan.sampled == plan.completed == (3, 50, 51, 120, 199) and plan.counts()["clients/online"] == 5


@pytest.mark.parametrize("wanted, over, expected", [(100, 0.1, 110), (20, 0.3, 26), (10, 0.25, 13)])
def test_over_selection_samples_the_ceiling_of_the_exact_product(wanted, over, expected):
    # 100 * 1.1 is 110.00000000000001 in floating point: still 110 clients, not 111
    pop = population(num_clients=300, clients_per_round=wanted, over_selection=over)
    assert len(pop.plan(1).sampled) == expected


def test_an_over_selection_past_every_online_client_samples_them_all():
    """``over_selection: 1e308`` made the product infinite: ``math.ceil``'s OverflowError in round 1, a traceback."""
    for over in (9.0, 1e308):
        assert population(over_selection=over).plan(1).sampled == tuple(range(200))


def test_per_client_availability_spread_and_diurnal_cycle():
    pop = population(availability=0.5, availability_spread=0.4, diurnal_amplitude=0.5, diurnal_period=4)
    assert pop.availability.min() < 0.2 and pop.availability.max() > 0.8
    assert pop.availability.mean() == pytest.approx(0.5, abs=0.05)
    peak, trough = pop.online_probability(1), pop.online_probability(3)  # sin = +1 and -1
    assert np.allclose(peak, np.clip(pop.availability * 1.5, 0, 1))
    assert np.allclose(trough, pop.availability * 0.5)


def test_deadline_drops_the_slow_tier():
    tiers = [{"fraction": 0.3, "samples_per_second": 10.0}, {"fraction": 0.7, "samples_per_second": 1000.0}]
    pop = population(speed_tiers=tiers, deadline_seconds=1.0)
    assert (pop.speed == 10.0).sum() == 60
    t = totals(pop)
    assert t["clients/late"] / t["clients/sampled"] == pytest.approx(0.3, abs=0.03)
    plan = pop.plan(7)
    assert all(pop.speed[c] == 10.0 for c in plan.late) and all(pop.speed[c] == 1000.0 for c in plan.completed)
    assert plan.simulated_seconds == 1.0  # the server waited until the deadline


def test_a_clients_compute_time_scales_with_its_sample_count():
    """Time = samples x local epochs / speed x a lognormal factor: at one speed, clients of 1,000
    samples miss a deadline that clients of 10 meet (a mean size for all, or a size from the wrong
    client, made every client alike), and a round's closing time follows the slowest reporter."""
    sizes = [10, 1000] * 100
    tiers = [{"fraction": 1.0, "samples_per_second": 100.0}]
    pop = population(sizes=sizes, speed_tiers=tiers, deadline_seconds=3.0)  # 0.1 s against 10 s (x e^(0.25 z))
    late = completed = 0
    for r in range(1, 31):
        plan = pop.plan(r)
        assert all(pop.sizes[c] == 1000 for c in plan.late) and all(pop.sizes[c] == 10 for c in plan.completed)
        late, completed = late + len(plan.late), completed + len(plan.completed)
    assert late > 250 and completed > 250
    # without a deadline the round waits for the large clients: about 10 s (not the 0.1 s of the small)
    plan = population(sizes=sizes, speed_tiers=tiers).plan(1)
    assert 5.0 < plan.simulated_seconds < 20.0
    two_epochs = Population({**DEFAULTS["population"], "num_clients": 200, "clients_per_round": 20,
                             "speed_tiers": tiers}, 2, tuple(sizes), 0).plan(1)
    assert two_epochs.simulated_seconds == pytest.approx(2 * plan.simulated_seconds)


def test_a_round_short_of_reports_closes_at_the_deadline():
    # only dropouts, no late client (each needs about 1 s): short of 20 reports, the server cannot tell
    # dropped from slow clients and waits until the deadline; without a deadline it closes at the last
    # report, as a full round does with or without one
    waiting, open_ended = population(dropout=0.3, deadline_seconds=30.0), population(dropout=0.3)
    short = 0
    for r in range(1, 20):
        plan, same = waiting.plan(r), open_ended.plan(r)
        assert not plan.late and plan.completed == same.completed
        if len(plan.completed) < 20:
            short += 1
            assert plan.simulated_seconds == 30.0 and same.simulated_seconds < 3.0
        else:
            assert plan.simulated_seconds == same.simulated_seconds < 3.0
    assert short > 0


def test_a_round_short_of_reports_because_few_are_online_closes_at_its_last_report():
    """Fewer clients online than clients_per_round, nobody dropping out or late: every sampled client
    has reported, the server has nobody to wait for and closes at the last report, not at the deadline;
    with one dropout among them it waits until the deadline."""
    few = dict(availability=0.05, deadline_seconds=30.0)
    closed_early = waited = 0
    for r in range(1, 30):
        plan = population(**few).plan(r)
        assert len(plan.sampled) < 20 and plan.completed == plan.sampled and plan.sampled
        assert plan.simulated_seconds == population(availability=0.05).plan(r).simulated_seconds < 3.0
        closed_early += 1
        dropping = population(**few, dropout=0.2).plan(r)
        if dropping.dropped:
            assert dropping.simulated_seconds == 30.0
            waited += 1
    assert closed_early and waited


def test_over_selection_keeps_the_first_to_report():
    tiers = [{"fraction": 0.5, "samples_per_second": 10.0}, {"fraction": 0.5, "samples_per_second": 1000.0}]
    pop = population(speed_tiers=tiers, over_selection=0.5)
    plan = pop.plan(2)
    assert len(plan.sampled) == 30 and len(plan.completed) == 20
    left_out = set(plan.sampled) - set(plan.completed)
    slowest_kept = max(pop.speed[c] ** -1 for c in plan.completed)
    assert all(pop.speed[c] ** -1 >= slowest_kept for c in left_out)


def test_availability_trace_decides_who_is_online(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n" + "".join(f"{r},{c}\n" for r in range(2) for c in range(r, 200, 2)))
    pop = population(availability_trace=str(trace))
    odd, even = pop.plan(1), pop.plan(2)
    assert len(odd.sampled) == len(even.sampled) == 20  # sampled among the 100 online
    assert all(c % 2 == 1 for c in odd.sampled)  # round 1 -> trace round 1: odd ids
    assert all(c % 2 == 0 for c in even.sampled)  # wraps around to trace round 0


def test_a_trace_edited_between_two_runs_of_one_process_is_read_again(tmp_path):
    """A sweep or a claim runs many runs in one process: the second must see the trace as it is then."""
    from simulator.population import read_trace
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n0,1\n")
    assert read_trace(str(trace)) == AvailabilityTrace(1, {0: frozenset({1})})
    trace.write_text("round,client\n0,2\n1,3\n")
    os.utime(trace, ns=(10**18, 10**18))  # a later version, whatever the file system's clock resolution
    assert read_trace(str(trace)) == AvailabilityTrace(2, {0: frozenset({2}), 1: frozenset({3})})


def test_a_trace_whose_round_is_as_large_as_a_timestamp_is_read_without_a_round_per_row_between(tmp_path):
    """Round 1700000000 (a timestamp in the round column) was a tuple of 1.7e9 rounds: validate grew past
    3.5 GB in 20 s. The trace's period is still its largest round + 1; the rounds between have no client."""
    from simulator.population import read_trace
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client\n0,1\n1700000000,2\n")
    read = read_trace(str(trace))
    assert read.length == 1_700_000_001 and len(read.online) == 2
    assert [read.online_at(r) for r in (0, 1, 1_700_000_000, 1_700_000_001)] == [
        frozenset({1}), frozenset(), frozenset({2}), frozenset({1})]


def test_a_bad_availability_trace_is_one_line_when_the_scenario_loads(tmp_path):
    def trace(text):
        path = tmp_path / f"trace{len(list(tmp_path.iterdir()))}.csv"
        path.write_text(text)
        return str(path)
    key = "population.availability_trace"
    cases = [(str(tmp_path / "missing.csv"), f"{key}: cannot read {tmp_path / 'missing.csv'}: No such file"),
             (trace("round,client\n0,3\n1,8\n"),
              f"{key}: expected client ids in [0, 8) (population.num_clients), got 8"),
             (trace("round,id\n0,3\n"), f"{key}: expected a CSV with columns round,client"),
             (trace("round,client\n0,x\n"), f"{key}: expected a CSV with columns round,client"),
             (trace("round,client\n-1,2\n"), "round -1 is negative"),
             # a stray quote swallows the rest of a large file into one field: csv's own error
             (trace("round,client\n0,\"1\n" + "0,1\n" * 40_000), f"{key}: expected a CSV with columns round,client")]
    for path, message in cases:
        with pytest.raises(ScenarioError) as err:
            resolve({"population": {"num_clients": 8, "clients_per_round": 4, "availability_trace": path}})
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    good = trace("round,client\n0,3\n1,7\n")
    resolve({"population": {"num_clients": 8, "clients_per_round": 4, "availability_trace": good}})


def test_speed_tiers_are_validated():
    cases = [([{"fraction": 1.0}], "population.speed_tiers[0]: expected a mapping {fraction, samples_per_second}"),
             ([{"fraction": 1.0, "samples_per_second": 9}, {"fraction": 1.0, "samples_per_second": 0}],
              "population.speed_tiers[1].samples_per_second: expected a positive number, got 0"),
             ([{"fraction": True, "samples_per_second": 9}], "population.speed_tiers[0].fraction: expected a positive"),
             ([], "population.speed_tiers: expected a non-empty list of {fraction, samples_per_second}, got []"),
             ([1.0], "population.speed_tiers[0]: expected a mapping"),
             # fractions that do not sum to 1 were rescaled without a word
             ([{"fraction": 0.5, "samples_per_second": 9}, {"fraction": 0.3, "samples_per_second": 90}],
              "population.speed_tiers: expected fractions summing to 1, got 0.8"),
             ([{"fraction": 0.5, "samples_per_second": 9}, {"fraction": 0.495, "samples_per_second": 90}],
              "population.speed_tiers: expected fractions summing to 1, got 0.995")]
    for tiers, message in cases:
        with pytest.raises(ScenarioError) as err:
            resolve({"population": {"speed_tiers": tiers}})
        assert message in str(err.value), str(err.value)


@pytest.mark.parametrize("fractions, num_clients, hand_counts", [
    ([0.2, 0.5, 0.3], 7, [1, 4, 2]),     # quotas 1.4, 3.5, 2.1: the one left over to the largest remainder
    ([0.4, 0.3, 0.3], 16, [6, 5, 5]),    # 6.4, 4.8, 4.8
    ([0.02, 0.98], 10, [0, 10]),         # 0.2, 9.8 (the first tiers took the leftovers: 1, 9)
    ([0.2, 0.5, 0.3], 300, [60, 150, 90]),
])
def test_each_speed_tier_holds_its_fraction_of_the_clients_rounded_to_the_nearest(fractions, num_clients,
                                                                                  hand_counts):
    tiers = [{"fraction": f, "samples_per_second": float(10 ** i)} for i, f in enumerate(fractions)]
    speed = population(num_clients=num_clients, speed_tiers=tiers).speed
    assert [int((speed == 10.0 ** i).sum()) for i in range(len(tiers))] == hand_counts


def test_an_availability_spread_reaching_zero_is_refused():
    """With availability 0.1 and a spread of 0.2 a quarter of the clients would never be online (their
    drawn availability clipped to 0): 259 of 1000 in 2000 rounds."""
    with pytest.raises(ScenarioError, match=r"population.availability_spread: expected less than "
                                            r"population.availability \(0.1\), or the clients whose availability "
                                            r"it takes to 0 are never online; got 0.2"):
        resolve({"population": {"availability": 0.1, "availability_spread": 0.2}})
    with pytest.raises(ScenarioError, match="population.availability_spread: expected less than"):
        resolve({"population": {"availability": 0.1, "availability_spread": 0.1}})  # reaches 0 exactly
    resolve({"population": {"availability": 0.1, "availability_spread": 0.09}})


def test_speed_tiers_fall_on_clients_drawn_by_the_seed_not_by_id():
    tiers = [{"fraction": 0.5, "samples_per_second": 10.0}, {"fraction": 0.5, "samples_per_second": 1000.0}]
    slow = {seed: set(np.flatnonzero(population(seed=seed, speed_tiers=tiers).speed == 10.0)) for seed in (0, 1)}
    assert len(slow[0]) == len(slow[1]) == 100
    assert slow[0] != set(range(100)) and slow[0] != slow[1]
    assert 30 < len(slow[0] & set(range(100))) < 70  # not the low ids


def test_a_client_s_compute_time_grows_with_its_local_epochs():
    """Same draws, twice the epochs: every time doubles, so the round closes twice as late."""
    config = {**DEFAULTS["population"], "num_clients": 50, "clients_per_round": 10}
    one, two = (Population(config, epochs, (100,) * 50, 0).plan(4) for epochs in (1, 2))
    assert one.sampled == two.sampled and one.completed == two.completed
    assert two.simulated_seconds == pytest.approx(2 * one.simulated_seconds, rel=1e-12)


def test_dropped_late_and_reporting_clients_split_the_cohort():
    """With dropout and a deadline together, a dropped client is only dropped (never also late):
    dropped, late and reporting are disjoint and make up the sampled cohort."""
    tiers = [{"fraction": 0.5, "samples_per_second": 10.0}, {"fraction": 0.5, "samples_per_second": 1000.0}]
    pop = population(dropout=0.5, speed_tiers=tiers, deadline_seconds=1.0)
    for round_index in range(1, 21):
        plan = pop.plan(round_index)
        parts = [set(plan.dropped), set(plan.late), set(plan.completed)]
        assert all(parts) and sum(map(len, parts)) == len(set().union(*parts))
        assert set().union(*parts) == set(plan.sampled)


def test_the_round_closes_at_the_last_kept_report():
    """Two clients of 100 samples, one at 1 sample/s (about 100 s: 100 s x a jitter exp(0.25 z),
    within [36.7 s, 272 s] for |z| < 4) and one at 10**6 samples/s (about 10**-4 s, alike). Both kept: the
    round closes when the slow one reports. One kept of the two (over-selection): the fast one
    reports first and the round closes then, without waiting for the slow one. Either way, a
    deadline above every report's time changes nothing (the round is full)."""
    tiers = [{"fraction": 0.5, "samples_per_second": 1.0}, {"fraction": 0.5, "samples_per_second": 1e6}]
    for deadline in (None, 10_000.0):
        both = population(num_clients=2, clients_per_round=2, speed_tiers=tiers, deadline_seconds=deadline)
        first = population(num_clients=2, clients_per_round=1, over_selection=1.0, speed_tiers=tiers,
                           deadline_seconds=deadline)
        fast = int(np.flatnonzero(first.speed == 1e6)[0])
        for r in range(1, 11):
            assert both.plan(r).completed == (0, 1) and 36.7 < both.plan(r).simulated_seconds < 272
            assert first.plan(r).sampled == (0, 1) and first.plan(r).completed == (fast,)
            assert 3.67e-5 < first.plan(r).simulated_seconds < 2.72e-4


def test_the_cohort_schedule_plans_the_engine_s_rounds_with_the_scenario_s_local_epochs():
    """The methods' schedule (CohortSchedule.of) and the engine (a Population with
    training.local_epochs) must agree on who completes: the slow tier's clients (100 samples at
    300/s: about 1/3 s an epoch) mostly meet a 0.6 s deadline with 1 epoch and mostly miss it with
    3, so a schedule planning 1 epoch would hand the methods other cohorts."""
    tiers = [{"fraction": 0.5, "samples_per_second": 300.0}, {"fraction": 0.5, "samples_per_second": 10_000.0}]
    scenario = resolve({"seed": 5, "training": {"local_epochs": 3},
                        "population": {"num_clients": 40, "clients_per_round": 8, "speed_tiers": tiers,
                                       "deadline_seconds": 0.6}})
    sizes, rounds = (100,) * 40, range(1, 11)
    engine = Population(scenario["population"], scenario["training"]["local_epochs"], sizes, 5)
    planned = [engine.plan(r).completed for r in rounds]
    one_epoch = Population(scenario["population"], 1, sizes, 5)
    assert planned != [one_epoch.plan(r).completed for r in rounds]  # the epochs matter here
    assert CohortSchedule.of(scenario, sizes).completed(rounds) == planned


def test_a_client_whose_time_equals_the_deadline_is_on_time():
    """Only a time past the deadline is late. One client, one round: its time is the round's closing
    time without a deadline (its draws do not depend on the deadline); a deadline of exactly that
    time keeps it, the largest float below it makes it late."""
    alone = population(num_clients=1).plan(1)
    seconds = alone.simulated_seconds
    assert alone.completed == (0,) and seconds > 0
    exactly = population(num_clients=1, deadline_seconds=seconds).plan(1)
    assert exactly.completed == (0,) and exactly.late == () and exactly.simulated_seconds == seconds
    just_before = population(num_clients=1, deadline_seconds=float(np.nextafter(seconds, 0))).plan(1)
    assert just_before.completed == () and just_before.late == (0,)


def test_over_selection_keeps_clients_wanted_among_those_that_report_not_among_those_sampled():
    """Two clients, one wanted, both sampled (over-selection 1.0), dropout 0.5: in a round in which
    the fast client drops out and the slow one reports, the slow one is kept (the first report to
    come in), not nobody (the fastest sampled client, then dropped). Every round keeps
    min(1, reporters) clients: the fast one whenever it reports."""
    tiers = [{"fraction": 0.5, "samples_per_second": 1.0}, {"fraction": 0.5, "samples_per_second": 1e6}]
    pop = population(num_clients=2, clients_per_round=1, over_selection=1.0, dropout=0.5, speed_tiers=tiers)
    fast, slow = int(np.flatnonzero(pop.speed == 1e6)[0]), int(np.flatnonzero(pop.speed == 1.0)[0])
    only_the_slow_one_reported = 0
    for r in range(1, 31):
        plan = pop.plan(r)
        assert plan.sampled == (0, 1) and plan.late == ()
        reporting = set(plan.sampled) - set(plan.dropped)
        expected = (fast,) if fast in reporting else (slow,) if slow in reporting else ()
        assert plan.completed == expected, r
        only_the_slow_one_reported += reporting == {slow}
    assert only_the_slow_one_reported > 0  # the case in question occurs


def test_a_rounds_plan_does_not_depend_on_the_rounds_planned_before():
    """A resumed run plans with a new Population from its next round on: each round's plan must be
    the uninterrupted run's, every draw of the plan (online, cohort, dropout, times) in play, so no
    draw may come from a stream carried over from the rounds before."""
    tiers = [{"fraction": 0.5, "samples_per_second": 50.0}, {"fraction": 0.5, "samples_per_second": 1000.0}]
    config = dict(availability=0.7, availability_spread=0.2, diurnal_amplitude=0.3, diurnal_period=6,
                  dropout=0.3, over_selection=0.5, speed_tiers=tiers, deadline_seconds=2.0)
    plans = [population(**config).plan(r) for r in range(13)]
    assert all(p.dropped and p.late and len(p.completed) < len(p.sampled) for p in plans[1:])
    for start in (1, 4, 9):
        resumed = population(**config)
        assert [resumed.plan(r) for r in range(start, 13)] == plans[start:], start
    backwards = population(**config)
    assert [backwards.plan(r) for r in reversed(range(13))] == plans[::-1]
