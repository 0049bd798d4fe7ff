"""The price catalog's memory sizes and MIG profiles (what right-sizing compares memory in use with): the packaged
ones agree with the MIG share table the ledger prices slices by, and bad ones are refused naming the field."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from finops.jobs.mig import mig_share, parse_profile
from finops.pricing.catalog import CatalogError, MigProfiles, load_catalog

MODEL = """\
currency: USD
tariff_per_kwh: 0.1
tariff_source: {url: "https://example.com/tariff", note: tariff}
pue: 1.5
pue_source: {url: "https://example.com/pue", note: pue}
models:
  X1:
    description: test GPU
    match: ['\\bX1\\b']
%s    prices:
      - pricing_model: spot
        effective_from: 2025-01-01
        rate: 1
        sources: [{url: "https://example.com/x1", note: x1}]
"""
SOURCE = '{url: "https://example.com/mig", note: guide}'
MEMORY = f"    memory: {{gib: 80, source: {SOURCE}}}\n"


def test_packaged_mig_profiles_are_priced_as_the_ledger_prices_slices() -> None:
    catalog = load_catalog()
    with_mig = {key: model for key, model in catalog.models.items() if model.mig is not None}
    assert set(with_mig) == {"H100-SXM-80GB", "H200", "B200", "A100-SXM4-80GB"}
    for key, model in with_mig.items():
        assert model.mig is not None and model.memory is not None and model.vendor == "nvidia"
        largest = max(model.mig.profiles, key=MigProfiles.memory_gib)
        assert MigProfiles.memory_gib(largest) == model.memory.gib, f"{key}: the 7g profile holds the whole memory"
        for profile in model.mig.profiles:
            slices, base = parse_profile(profile)
            assert base == profile
            assert mig_share(profile, key) == Fraction(slices, 7), f"{key} {profile}"
    assert all(model.memory is not None and model.vendor is not None for model in catalog.models.values())


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (f"    mig: {{profiles: ['1g.10gb'], source: {SOURCE}}}\n", r"models\.X1: Value error, mig profiles need"),
        (
            f"    memory: {{gib: 40, source: {SOURCE}}}\n    mig: {{profiles: ['7g.80gb'], source: {SOURCE}}}\n",
            r"mig profile '7g\.80gb' holds more memory than the model's 40 GiB",
        ),
        (
            f"{MEMORY}    mig: {{profiles: ['1g.10gb', 'one'], source: {SOURCE}}}\n",
            r"models\.X1\.mig\.profiles\[1\]: String should match pattern",
        ),
        (
            f"{MEMORY}    mig: {{profiles: ['1g.10gb', '1g.10gb'], source: {SOURCE}}}\n",
            r"models\.X1\.mig\.profiles: Value error, profile '1g\.10gb' is listed twice",
        ),
        (f"    memory: {{gib: 0, source: {SOURCE}}}\n", r"models\.X1\.memory\.gib: Input should be greater than 0"),
        ("    memory: {gib: 80}\n", r"models\.X1\.memory\.source: Field required"),
        ("    vendor: intel\n", r"models\.X1\.vendor: Input should be 'nvidia' or 'amd'"),
    ],
)
def test_bad_memory_and_mig_are_named(tmp_path: Path, block: str, message: str) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(MODEL % block)
    with pytest.raises(CatalogError, match=message) as caught:
        load_catalog(path)
    assert str(path) in str(caught.value)


def test_memory_and_mig_are_optional(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(MODEL % "")
    model = load_catalog(path).models["X1"]
    assert (model.vendor, model.memory, model.mig) == (None, None, None)
    path.write_text(MODEL % f"    memory: {{gib: 47.5, source: {SOURCE}}}\n")
    memory = load_catalog(path).models["X1"].memory
    assert memory is not None and memory.bytes == 47.5 * 2**30
