"""The wall-time busy meter on a scripted clock: a stand-in device's readings are exact, the
integral over a window counts idle gaps, unread stretches say "unmeasured", and the steady window
leaves out the start-up and the drain."""

from __future__ import annotations

import pytest

from activities.busy_meter import BusyMeter, StandInDevice, steady_window


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_stand_in_device_reads_its_busy_fraction_since_the_last_read():
    clock = Clock()
    device = StandInDevice(clock)
    clock.now += 1.0  # idle 1 s
    assert device.read() == 0.0
    with device.hold():
        clock.now += 0.5
        with device.hold():  # two evaluations at once are still one busy device
            clock.now += 0.25
        clock.now += 0.25
    clock.now += 1.0  # busy 1 s of 2
    assert device.read() == pytest.approx(0.5)
    with device.hold():
        clock.now += 0.4
        assert device.read() == pytest.approx(1.0)  # still held: the stretch so far is busy
        clock.now += 0.6
    assert device.read() == pytest.approx(1.0)


def test_the_meter_integrates_idle_gaps_between_evaluations():
    clock = Clock()
    device = StandInDevice(clock)
    meter = BusyMeter(device.read, clock=clock, thread=False).start()
    # 10 s in 0.5 s samples: busy 0..3 s and 5..9 s, idle otherwise.
    for step in range(20):
        start = clock.now
        busy = 0 <= step < 6 or 10 <= step < 18
        if busy:
            with device.hold():
                clock.now = start + 0.5
        else:
            clock.now = start + 0.5
        meter.sample()
    assert meter.fraction(100.0, 110.0) == pytest.approx(7.0 / 10.0)
    assert meter.fraction(100.0, 103.0) == pytest.approx(1.0)
    assert meter.fraction(103.0, 105.0) == pytest.approx(0.0)
    # Half of a sample's stretch counts with that sample's average.
    assert meter.fraction(102.75, 103.25) == pytest.approx(0.5)


def test_a_window_mostly_unread_is_unmeasured_not_idle():
    clock = Clock()
    values = iter([0.0, 1.0, None, None, None, 1.0])

    def read() -> float:
        value = next(values)
        if value is None:
            raise RuntimeError("NVML went away")
        return value

    meter = BusyMeter(read, clock=clock, thread=False).start()
    for _ in range(5):
        clock.now += 1.0
        meter.sample()
    assert meter.fraction(100.0, 101.0) == pytest.approx(1.0)
    assert meter.fraction(100.0, 105.0) is None  # 3 of 5 s unread
    assert meter.fraction(200.0, 210.0) is None  # never sampled
    with pytest.raises(ValueError, match="ends after it starts"):
        meter.fraction(5.0, 5.0)


def test_a_reading_out_of_range_is_not_trusted():
    clock = Clock()
    meter = BusyMeter(lambda: 1.7, clock=clock, thread=False).start()
    clock.now += 1.0
    meter.sample()
    assert meter.fraction(100.0, 101.0) is None


def test_the_meter_samples_in_its_thread():
    device = StandInDevice()
    meter = BusyMeter(device.read, interval_s=0.01).start()
    import time

    began = time.monotonic()
    with device.hold():
        time.sleep(0.3)
    meter.close()
    assert meter.fraction(began + 0.05, began + 0.25) == pytest.approx(1.0, abs=0.05)


def test_the_steady_window_runs_from_the_first_end_to_the_last_start():
    assert steady_window([]) is None
    assert steady_window([(0.0, 5.0), (0.1, 5.2), (5.0, 10.0), (5.2, 10.1)]) == (5.0, 5.2)
    assert steady_window([(0.0, 5.0)]) is None  # one evaluation: no steady state
    with pytest.raises(ValueError):
        BusyMeter(lambda: 0.0, interval_s=0)
