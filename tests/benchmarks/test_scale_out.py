"""The scale-out benchmark's summary of repeated rounds (``benchmarks/scale_out.py --repeats``)."""

import pytest

from benchmarks.scale_out import overheads


def test_repeated_rounds_report_each_modes_median_run_and_the_overheads_of_the_medians():
    def runs(speeds: list[float]) -> list[dict]:
        return [{"frames_per_s": fps, "startup_s": i} for i, fps in enumerate(speeds)]

    def us(fps: float) -> float:
        return 1e6 / fps

    out = overheads({"inprocess": runs([5500.0, 4500.0, 5000.0]), "workers": runs([4000.0, 3200.0, 5000.0]),
                     "ray": runs([3000.0, 3600.0, 2000.0])})
    assert out["inprocess"]["startup_s"] == 2 and out["workers"]["startup_s"] == 0  # the median runs, whole
    assert out["ray"]["startup_s"] == 0 and out["ray"]["rounds_frames_per_s"] == [3000.0, 3600.0, 2000.0]
    assert out["workers"]["overhead_us_per_frame"] == pytest.approx(50.0)  # against in-process's median, 5,000/s
    assert out["ray"]["overhead_us_per_frame"] == pytest.approx(us(3000) - 200.0)
    assert out["ray"]["ratio_vs_inprocess"] == pytest.approx(0.6)
    assert out["ray_over_local_overhead"] == pytest.approx((us(3000) - 200.0) / 50.0)
    first, second, third = out["round_ray_over_local"]  # each round against its own in-process run
    assert first == pytest.approx((us(3000) - us(5500)) / (us(4000) - us(5500)))
    assert second == pytest.approx((us(3600) - us(4500)) / (us(3200) - us(4500)))
    assert third is None  # the workers as fast as in-process: no local overhead to compare with
