"""What the Prometheus pull marks on AMD packages, per UTC hour of a query window
(:func:`finops.ingest.amd_exporter.marked_by_hour`): activity per hour, the device count and totals per window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from finops.ingest.amd_exporter import PackageLabels, marked_by_hour

T0 = datetime(2026, 10, 1, tzinfo=UTC)


def _reading(uuid: str, minute: int, **values: float) -> Sample:
    return Sample(
        "gpu", {"gpu": uuid[-1], "uuid": uuid, "model": "AMD Instinct"}, values, T0 + timedelta(minutes=minute)
    )


def test_activity_decided_per_hour_of_the_window() -> None:
    """An MI300X in CPX mode whose exporter is upgraded at the second hour: in the first, partition 0 alone has the
    activity and reports it for the package; in the second each partition has its own. Partition 0 reports the
    energy counter in both, for a package of 8 (its make): two runs, one batch each."""
    packages = {f"p{i}": PackageLabels("S1", "cpx", str(i), 8) for i in range(8)}
    samples = []
    for minute in (0, 30, 60, 90):
        for i in range(8):
            values = {m.GPU_MEMORY_USED: 1.0}
            if i == 0:
                values[m.GPU_ENERGY] = 1000.0 * minute
            if i == 0 or minute >= 60:
                values[m.GPU_UTILIZATION] = 0.5
            samples.append(_reading(f"p{i}", minute, **values))
    runs = marked_by_hour(samples, packages)
    assert [len(run) for run in runs] == [16, 16]
    first, second = ({s.labels["uuid"]: s.package for s in run} for run in runs)
    assert first["p0"] is not None and set(first["p0"].fields) == {"energy_joules", "utilization_ratio"}
    assert second["p0"] is not None and second["p0"].fields == ("energy_joules",)
    assert {package.devices for run in (first, second) for package in run.values() if package} == {8}


def test_device_count_and_totals_are_the_window_s() -> None:
    """A two-die package of a make that does not say its dies (the count is the devices seen) whose second die is
    missing for the whole second hour: die 0 keeps one divisor (2) and its energy marking over the window, so that
    its share of the counter does not jump from v/2 to v between hours; one run."""
    packages = {f"d{i}": PackageLabels("S2", "", "", None) for i in range(2)}
    samples = [_reading("d0", minute, **{m.GPU_ENERGY: 1000.0 * minute, m.GPU_UTILIZATION: 0.5}) for minute in (0, 60)]
    samples.insert(1, _reading("d1", 0, **{m.GPU_ENERGY: 0.0, m.GPU_UTILIZATION: 0.5}))
    runs = marked_by_hour(samples, packages)
    assert len(runs) == 1
    marks = [(s.labels["uuid"], s.package.devices if s.package else None, s.package.fields if s.package else ()) for
             s in runs[0]]  # fmt: skip
    assert marks == [("d0", 2, ("energy_joules",)), ("d1", 2, ()), ("d0", 2, ("energy_joules",))]
