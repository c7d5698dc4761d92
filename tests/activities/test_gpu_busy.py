"""The GPU-busy integral over evaluation windows, with a hand-driven clock and utilisation reading
in place of NVML (there is no GPU here), and what a machine without NVML gets."""

from __future__ import annotations

import pytest

from activities.gpu_busy import NO_DEVICE, BusySampler, NvmlUtilization, gpu_index, sampler_for


class Gpu:
    """A clock and a utilisation the test sets: ``read`` stands in for NVML's reading."""

    def __init__(self) -> None:
        self.now = 100.0
        self.util = 0.0
        self.fail = False

    def clock(self) -> float:
        return self.now

    def read(self) -> float:
        if self.fail:
            raise OSError("NVML_ERROR_GPU_IS_LOST")
        return self.util

    def run(self, sampler: BusySampler, seconds: float, util: float) -> None:
        """``seconds`` at ``util``, ending in a sample (the thread's job in production)."""
        self.now += seconds
        self.util = util
        sampler.sample()


def sampler(gpu: Gpu, **options) -> BusySampler:
    return BusySampler(lambda: gpu.read, clock=gpu.clock, thread=False, **options)


def test_one_window_integrates_utilisation_over_its_segments():
    gpu = Gpu()
    busy = sampler(gpu)
    window = busy.begin()
    gpu.run(busy, 2.0, 0.5)
    gpu.run(busy, 1.0, 1.0)
    gpu.now += 3.0
    gpu.util = 0.0
    figures = busy.end(window)
    assert figures.wall_s == pytest.approx(6.0)
    assert figures.wall_share_s == pytest.approx(6.0)
    assert figures.gpu_busy_s == pytest.approx(2.0 * 0.5 + 1.0 * 1.0)
    assert figures.reason == ""
    # Closed once: a second end neither moves the end nor counts again.
    gpu.now += 10.0
    assert busy.end(window) is figures


def test_concurrent_windows_share_each_busy_second():
    gpu = Gpu()
    busy = sampler(gpu)
    a = busy.begin()
    gpu.run(busy, 2.0, 1.0)  # a alone: 2 busy s for a
    b = busy.begin()
    gpu.run(busy, 4.0, 0.5)  # a and b: 2 busy s, 1 each
    gpu.now += 2.0
    gpu.util = 1.0
    first = busy.end(a)  # the end's sample covers 2 s at 1.0, still shared by two: 1 each
    gpu.run(busy, 3.0, 0.0)  # b alone, idle
    second = busy.end(b)
    assert first.gpu_busy_s == pytest.approx(2.0 + 1.0 + 1.0)
    assert second.gpu_busy_s == pytest.approx(1.0 + 1.0)
    # Together they account for the GPU's busy seconds exactly once: 2 + 2 + 2.
    assert first.gpu_busy_s + second.gpu_busy_s == pytest.approx(6.0)
    assert (first.wall_s, second.wall_s) == (pytest.approx(8.0), pytest.approx(9.0))
    # The shares add up to the time at least one window was open (11 s), not to 17.
    assert first.wall_share_s == pytest.approx(2.0 + 2.0 + 1.0)
    assert second.wall_share_s == pytest.approx(2.0 + 1.0 + 3.0)
    assert first.wall_share_s + second.wall_share_s == pytest.approx(11.0)


def test_idle_time_between_windows_counts_for_nobody():
    gpu = Gpu()
    busy = sampler(gpu)
    first = busy.begin()
    gpu.run(busy, 1.0, 1.0)
    busy.end(first)
    gpu.run(busy, 50.0, 1.0)  # no window open: not even sampled
    second = busy.begin()
    gpu.now += 1.0
    gpu.util = 0.25
    figures = busy.end(second)
    assert figures.gpu_busy_s == pytest.approx(0.25)
    assert figures.wall_s == pytest.approx(1.0)


def test_failed_readings_leave_their_time_unmeasured():
    gpu = Gpu()
    busy = sampler(gpu)
    window = busy.begin()
    gpu.run(busy, 9.5, 1.0)
    gpu.fail = True
    gpu.now += 0.5  # 0.5 of 10 s unread: within the limit, the rest counts
    figures = busy.end(window)
    assert figures.gpu_busy_s == pytest.approx(9.5)
    window = busy.begin()
    gpu.run(busy, 5.0, 1.0)  # fails too
    gpu.fail = False
    gpu.now += 5.0
    gpu.util = 1.0
    figures = busy.end(window)
    assert figures.gpu_busy_s is None and "5.0 of 10.0 s" in figures.reason
    assert figures.wall_s == pytest.approx(10.0)


def test_a_reading_outside_zero_to_one_is_not_taken():
    gpu = Gpu()
    busy = sampler(gpu)
    window = busy.begin()
    gpu.run(busy, 1.0, 42.0)  # a percent, not a fraction
    figures = busy.end(window)
    assert figures.gpu_busy_s is None


def test_a_window_longer_than_the_ring_counts_its_dropped_start_as_unmeasured():
    gpu = Gpu()
    busy = sampler(gpu, capacity=4)
    window = busy.begin()
    for _ in range(9):
        gpu.run(busy, 1.0, 1.0)
    gpu.now += 1.0
    figures = busy.end(window)
    # Only the last 4 samples are kept: 3 segments (3 s) measured, 7 s not.
    assert figures.wall_s == pytest.approx(10.0)
    assert figures.wall_share_s == pytest.approx(10.0)
    assert figures.gpu_busy_s is None and "7.0 of 10.0 s" in figures.reason


def test_a_source_that_cannot_open_gives_none_with_its_reason():
    def missing():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    gpu = Gpu()
    busy = BusySampler(missing, clock=gpu.clock, thread=False)
    window = busy.begin()
    gpu.now += 3.0
    figures = busy.end(window)
    assert figures.gpu_busy_s is None and "libnvidia-ml.so.1" in figures.reason
    assert (figures.wall_s, figures.wall_share_s) == (pytest.approx(3.0), pytest.approx(3.0))


def test_missing_nvml_library_gives_none_and_a_reason():
    busy = BusySampler(lambda: NvmlUtilization(0, library="libnvidia-ml-absent.so.1").read)
    window = busy.begin()
    figures = busy.end(window)
    assert figures.gpu_busy_s is None
    assert "NVML is not available" in figures.reason and "libnvidia-ml-absent.so.1" in figures.reason
    busy.close()


def test_this_machine_without_a_gpu_measures_nothing_and_does_not_raise():
    # The real library name: on a GPU machine this measures; here (no driver) it says why not.
    figures = sampler_for(0).end(sampler_for(0).begin())
    if figures.gpu_busy_s is None:
        assert "NVML" in figures.reason
    else:
        assert 0.0 <= figures.gpu_busy_s <= figures.wall_share_s
    nothing = sampler_for(None)
    assert nothing.end(nothing.begin()).reason == NO_DEVICE


@pytest.mark.parametrize(
    "environ, index",
    [({}, 0), ({"CUDA_VISIBLE_DEVICES": "3"}, 3), ({"CUDA_VISIBLE_DEVICES": " 2,5"}, 2),
     ({"CUDA_VISIBLE_DEVICES": "GPU-8f2c1d3e"}, None), ({"CUDA_VISIBLE_DEVICES": ""}, None),
     ({"CUDA_VISIBLE_DEVICES": "-1"}, None)],
)
def test_gpu_index_is_the_first_visible_device(environ, index):
    assert gpu_index(environ) == index


def test_a_sampling_thread_runs_and_stops():
    import time

    calls = []

    def read():
        calls.append(1)
        return 1.0

    busy = BusySampler(lambda: read, interval_s=0.01)
    window = busy.begin()
    time.sleep(0.2)
    figures = busy.end(window)
    busy.close()
    assert len(calls) > 5  # the thread sampled between begin and end
    assert figures.gpu_busy_s == pytest.approx(figures.wall_s)
