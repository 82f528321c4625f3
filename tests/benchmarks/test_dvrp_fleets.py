"""The fleet sizing of the real-size DVRP days (``benchmarks/dvrp_fleets.py``)."""

import pytest

from benchmarks.dvrp_fleets import file_days, generated_days, min_fleet


def test_min_fleet_finds_the_best_known_fleet_of_solomon_days(solomon_dir):
    # the best-known (vehicles first) solutions: C201 3 vehicles, R101 19 (SINTEF's Solomon table)
    (_, c201), = file_days(str(solomon_dir / "solomon_txt" / "C201.txt"))
    vehicles, km = min_fleet(c201, seconds=2.0)
    assert vehicles == 3 and km == pytest.approx(591.6, abs=2.0)  # the optimal 3-vehicle plan is 591.56 km
    (_, r101), = file_days(str(solomon_dir / "solomon_txt" / "R101.txt"))
    assert 19 <= min_fleet(r101, seconds=2.0)[0] <= 20


def test_generated_days_are_the_envs_days():
    days = generated_days(40, 3)
    assert [name for name, _ in days] == ["N40_0", "N40_1", "N40_2"]
    for _, day in days:
        assert day["xy"].shape == (41, 2) and day["due"][0] == 1000.0 and day["capacity"] == 250.0
        assert (day["due"][1:] - day["ready"][1:] == 120.0).all()
    fleets = [min_fleet(day, seconds=0.5)[0] for _, day in days]
    assert all(2 <= m <= 4 for m in fleets), fleets  # 40 customers of 1-30 units, Q = 250: at least 2
