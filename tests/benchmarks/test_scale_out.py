"""The scale-out benchmark's summary of repeated rounds (``benchmarks/scale_out.py --repeats``)."""

import pytest

from benchmarks.scale_out import overheads


def test_repeated_rounds_report_each_modes_median_run_and_the_overheads_of_the_medians():
    def runs(speeds: list[float]) -> list[dict]:
        return [{"frames_per_s": fps, "startup_s": i} for i, fps in enumerate(speeds)]

    out = overheads({"inprocess": runs([5000.0, 4000.0, 5500.0]), "workers": runs([4000.0, 3200.0, 5000.0]),
                     "ray": runs([3000.0, 3600.0, 2000.0])})
    assert out["inprocess"]["startup_s"] == 0 and out["workers"]["startup_s"] == 0  # the median runs, whole
    assert out["ray"]["startup_s"] == 0 and out["ray"]["rounds_frames_per_s"] == [3000.0, 3600.0, 2000.0]
    assert out["workers"]["overhead_us_per_frame"] == pytest.approx(50.0)  # 1e6 / 4000 - 1e6 / 5000
    assert out["ray"]["overhead_us_per_frame"] == pytest.approx(1e6 / 3000 - 200.0)
    assert out["ray"]["ratio_vs_inprocess"] == pytest.approx(0.6)
    assert out["ray_over_local_overhead"] == pytest.approx((1e6 / 3000 - 200.0) / 50.0)
    assert out["round_ray_over_local"] == pytest.approx([(1e6 / 3000 - 200.0) / 50.0, (1e6 / 3600 - 250.0) / 62.5,
                                                         (500.0 - 1e6 / 5500) / (200.0 - 1e6 / 5500)])
    faster = overheads({"inprocess": runs([5000.0]), "workers": runs([5200.0]), "ray": runs([4000.0])})
    assert faster["ray_over_local_overhead"] is None and faster["round_ray_over_local"] == [None]  # no local overhead
