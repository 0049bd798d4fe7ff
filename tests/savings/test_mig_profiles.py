"""The one MIG slice rule of right-sizing and the nudges, over the price catalog's profiles: the smallest share of
the GPU, then the least memory, whose memory holds the peak × the headroom (1.2 by default); never the whole GPU."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from finops.pricing.catalog import GpuModel, load_catalog
from finops.savings.mig_profiles import MEMORY_HEADROOM, MigFit, smallest_profile

GIB = 2**30
CATALOG = load_catalog()
SOURCE = {"url": "https://example.com/mig", "note": "guide"}


def _model(gpu_name: str) -> GpuModel | None:
    key = CATALOG.resolve(gpu_name)
    return CATALOG.models[key] if key is not None else None


def _custom(profiles: list[str]) -> GpuModel:
    return GpuModel.model_validate(
        {
            "description": "test GPU",
            "match": [r"\bX1\b"],
            "prices": [{"pricing_model": "spot", "effective_from": "2025-01-01", "rate": "1", "sources": [SOURCE]}],
            "memory": {"gib": "80", "source": SOURCE},
            "mig": {"profiles": profiles, "source": SOURCE},
        }
    )


@pytest.mark.parametrize(
    ("gpu_name", "peak_gib", "profile"),
    [
        ("NVIDIA H100 80GB HBM3", 4, "1g.10gb"),
        ("NVIDIA H100 80GB HBM3", 8, "1g.10gb"),  # 9.6 GiB needed
        ("NVIDIA H100 80GB HBM3", 8.5, "1g.20gb"),  # 10.2 GiB needed
        ("NVIDIA H100 80GB HBM3", 10, "1g.20gb"),  # a peak of exactly 10 GiB has no headroom left in 1g.10gb
        ("NVIDIA-H100-80GB-HBM3", 21, "3g.40gb"),
        ("NVIDIA H100 80GB HBM3", 40, None),  # 48 GiB: only the whole GPU (7g.80gb) holds it
        ("NVIDIA A100-SXM4-80GB", 4, "1g.10gb"),
        ("NVIDIA H200", 50, "3g.71gb"),
        ("NVIDIA H200", 100, None),
        ("NVIDIA B200", 18, "1g.23gb"),
        ("NVIDIA L40S", 4, None),  # a catalog model without MIG profiles
        ("NVIDIA A30", 4, None),  # a model the packaged catalog does not have
    ],
)
def test_the_smallest_profile_holding_the_peak_with_headroom(gpu_name: str, peak_gib: float, profile) -> None:  # type: ignore[no-untyped-def]
    fit = smallest_profile(_model(gpu_name), gpu_name, int(peak_gib * GIB), MEMORY_HEADROOM)
    assert (fit.profile if fit is not None else None) == profile


def test_the_fit_carries_the_share_the_ledger_bills() -> None:
    h100 = _model("NVIDIA H100 80GB HBM3")
    assert smallest_profile(h100, "NVIDIA H100 80GB HBM3", 21 * GIB) == MigFit("3g.40gb", Fraction(3, 7), 40)
    exact = smallest_profile(h100, "NVIDIA H100 80GB HBM3", 10 * GIB, headroom=Decimal(1))
    assert exact is not None and exact.profile == "1g.10gb", "without headroom 10 GiB fits 1g.10gb"


def test_profiles_are_ranked_whatever_order_the_catalog_lists_them() -> None:
    model = _custom(["7g.80gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb"])
    fit = smallest_profile(model, "NVIDIA H100 80GB HBM3", 11 * GIB)
    assert fit == MigFit("1g.20gb", Fraction(1, 7), 20), "fewest compute slices first, then the least memory"


def test_a_profile_of_unknown_share_is_passed_over_with_a_note() -> None:
    notes: list[str] = []
    model = _custom(["1g.24gb", "3g.40gb"])  # 1g.24gb is on 7-slice and 4-slice GPUs: X1's count is unknown
    fit = smallest_profile(model, "X1", 4 * GIB, notes=notes)
    assert fit == MigFit("3g.40gb", Fraction(3, 7), 40)
    assert len(notes) == 1 and notes[0].startswith("MIG profile 1g.24gb: ")
    assert smallest_profile(None, "X1", GIB) is None


@pytest.mark.parametrize("headroom", [Decimal("0.9"), Decimal("NaN")])
def test_a_headroom_below_one_is_refused(headroom: Decimal) -> None:
    with pytest.raises(ValueError, match="memory headroom must be at least 1"):
        smallest_profile(_model("NVIDIA H100 80GB HBM3"), "NVIDIA H100 80GB HBM3", GIB, headroom)
