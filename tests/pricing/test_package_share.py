"""The share of its package a compute partition is billed as, by mode: DPX 1/2, TPX 1/3, QPX 1/4, CPX one per XCD (1/8
on an MI300X, 1/6 on an MI300A, AMD's "GPU partitioning" documentation), as the amdsmi source, the Prometheus pull
and the Slurm inventory name it; the catalogue's MI300X rate divided accordingly."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from collector.contract.partitions import package_devices
from collector.sources.amdsmi import AmdSmiSource
from finops.ingest.amd_exporter import PackageLabels, canonical_labels, reports_package
from finops.jobs.compute_partitions import gres_gpu_name
from finops.pricing.catalog import PricingModel, load_catalog
from finops.pricing.package_share import package_share, partition_name
from tests.support.fake_amdsmi import FakeAmdSmi, mi300x_cpx

AT = datetime(2026, 10, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("mode", "share"),
    [("dpx", Fraction(1, 2)), ("TPX", Fraction(1, 3)), ("qpx", Fraction(1, 4)), ("cpx", Fraction(1, 8))],
)
def test_each_mode_prices_its_share_of_an_mi300x(mode: str, share: Fraction) -> None:
    name = partition_name("AMD Instinct MI300X OAM", mode)
    assert name == f"AMD Instinct MI300X OAM ({mode.upper()} partition 1/{share.denominator})"
    assert package_share(name) == share
    catalog = load_catalog()
    assert catalog.resolve(name) == "MI300X"
    whole = catalog.rate("AMD Instinct MI300X", PricingModel.ON_DEMAND, AT)
    assert catalog.rate(name, PricingModel.ON_DEMAND, AT) == whole * share.numerator / share.denominator


def test_tpx_and_the_mi300a() -> None:
    assert partition_name("AMD Instinct MI300A", "tpx") == "AMD Instinct MI300A (TPX partition 1/3)"
    assert partition_name("AMD Instinct MI300A", "cpx") == "AMD Instinct MI300A (CPX partition 1/6)"  # 6 XCDs
    assert partition_name("AMD Instinct MI300X", "spx") == "AMD Instinct MI300X" and package_share("MI300X") == 1
    assert gres_gpu_name("mi300x_tpx") == "mi300x (TPX partition 1/3)"
    assert load_catalog().rate("mi300x (TPX partition 1/3)", PricingModel.ON_DEMAND, AT) == Decimal("2.00")


def test_tpx_from_the_exporter_and_from_amdsmi() -> None:
    names = {"gpu": "gpu_id", "UUID": "gpu_uuid", "modelName": "card_series", "partition": "gpu_partition_id",
             "partition_type": "gpu_compute_partition_type"}  # fmt: skip
    labels = {"gpu_id": "1", "gpu_uuid": "u1", "card_series": "AMD Instinct MI300A", "gpu_partition_id": "1",
              "gpu_compute_partition_type": "tpx"}  # fmt: skip
    canonical = canonical_labels(labels, names)
    assert canonical["modelName"] == "AMD Instinct MI300A (TPX partition 1/3)"
    assert not reports_package(canonical), "partition 1 of a TPX GPU does not report its power"
    devices = mi300x_cpx()[:3]
    for device in devices:
        device.compute_partition = "TPX"
    gpus = [s for s in AmdSmiSource(FakeAmdSmi(devices)).collect() if s.entity == "gpu"]
    assert {s.labels["model"] for s in gpus} == {"AMD Instinct MI300X (TPX partition 1/3)"}
    assert [s.package.devices if s.package else None for s in gpus] == [3, 3, 3]


def test_a_package_counts_its_devices_by_its_make() -> None:
    """The count each device's share is ``1 / n`` of (``package_devices``): the mode's partitions (6 for an MI300A in
    CPX), 2 for a two-die MI250X or MI250, else the devices seen; the partition's share of the price is the same n."""
    assert package_devices("AMD Instinct MI300X OAM (CPX partition 1/8)", "cpx") == 8
    assert package_devices("AMD Instinct MI300A", "cpx") == 6 and package_devices("AMD Instinct MI300X", "dpx") == 2
    assert package_devices("AMD Instinct MI250X", "none") == 2 and package_devices("AMD Instinct MI250", "") == 2
    assert (
        package_devices("AMD Instinct MI210", "none") is None and package_devices("AMD Instinct MI300X", "spx") is None
    )
    for mode in ("dpx", "tpx", "qpx", "cpx"):
        name = partition_name("AMD Instinct MI300X OAM", mode)
        assert package_share(name) == Fraction(1, package_devices(name, mode) or 0)
    seen = PackageLabels.of({"serial": "s", "modelName": "Some Future Instinct", "partition_type": "none"})
    assert seen is not None and seen.devices is None and seen.count(3) == 3  # an unknown make: the devices seen
