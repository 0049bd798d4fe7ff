"""GPU names as schedulers and drivers write them resolved to catalog models: NVML/DCGM/amd-smi product names,
Slurm GRES types as sites write them in gres.conf, Kubernetes ``nvidia.com/gpu.product`` labels."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from finops.jobs.kubernetes import product_model
from finops.pricing.catalog import CatalogError, PriceCatalog, PriceNotFound, PricingModel, load_catalog, normalise_name


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return load_catalog()


@pytest.mark.parametrize(
    ("name", "model"),
    [
        # Slurm GRES types (gres.conf Type=), any case, `_`/`-` variants
        ("a100", "A100-SXM4-80GB"),  # the documented default of a plain "a100"
        ("A100", "A100-SXM4-80GB"),
        ("a100_80g", "A100-SXM4-80GB"),
        ("a100-80gb", "A100-SXM4-80GB"),
        ("A100_80GB", "A100-SXM4-80GB"),
        ("h100", "H100-SXM-80GB"),
        ("h100_80gb", "H100-SXM-80GB"),
        ("h200", "H200"),
        ("l40s", "L40S"),
        ("b200", "B200"),
        ("mi250x", "MI250X"),
        ("mi250", "MI250"),
        ("mi210", "MI210"),
        ("MI300X", "MI300X"),
        # NVML / DCGM / amd-smi product names
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("AMD Instinct MI250X", "MI250X"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250", "MI250"),
        ("AMD Instinct MI250X/MI250", "MI250X"),  # amd-smi's one name for both modules: the MI250X
        ("Instinct MI210", "MI210"),  # the exporter's card_series (ROCm/device-metrics-exporter issue 135)
        # Kubernetes GPU feature discovery labels
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM-80GB"),
        ("NVIDIA-L40S", "L40S"),
        # catalog keys themselves
        ("A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("h100-sxm-80gb", "H100-SXM-80GB"),
    ],
)
def test_site_names_resolve_to_catalog_models(catalog: PriceCatalog, name: str, model: str) -> None:
    assert catalog.model_for(name) == model
    assert catalog.resolve(name) == model


def test_kubernetes_product_label_resolves(catalog: PriceCatalog) -> None:
    name = product_model({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    assert name is not None and catalog.model_for(name) == "H100-SXM-80GB"


def test_unknown_types_resolve_to_nothing(catalog: PriceCatalog) -> None:
    for name in ("v100", "a40", "mi100", "gpu", "mi300a"):
        assert catalog.resolve(name) is None
        with pytest.raises(PriceNotFound):
            catalog.model_for(name)


def test_gres_types_are_priced(catalog: PriceCatalog) -> None:
    at = datetime(2026, 3, 2, tzinfo=UTC)
    for gres, key in (("a100", "A100-SXM4-80GB"), ("mi250x", "MI250X"), ("mi300x", "MI300X")):
        assert catalog.rate(gres, PricingModel.ON_PREM, at) == catalog.rate(key, PricingModel.ON_PREM, at)
    assert catalog.rate("mi250x", PricingModel.ON_DEMAND, at) > 0


def test_normalise_name() -> None:
    assert normalise_name(" A100__80GB ") == normalise_name("a100-80gb") == "a100-80gb"
    assert normalise_name("NVIDIA-H100-80GB-HBM3") == normalise_name("NVIDIA H100 80GB HBM3")


CATALOG = """\
currency: USD
tariff_per_kwh: 0.1
tariff_source: {url: "https://example.com/tariff", note: tariff}
pue: 1.5
pue_source: {url: "https://example.com/pue", note: pue}
models:
  A100-40GB:
    description: test GPU
    aliases: [%(first)s]
    match: ['\\bA100-SXM4-40GB\\b']
    prices:
      - {pricing_model: spot, effective_from: 2025-01-01, rate: 1, sources: [{url: "https://example.com/a", note: a}]}
  A100-80GB:
    description: test GPU
    aliases: [%(second)s]
    match: ['\\bA100-SXM4-80GB\\b']
    prices:
      - {pricing_model: spot, effective_from: 2025-01-01, rate: 2, sources: [{url: "https://example.com/b", note: b}]}
"""


@pytest.mark.parametrize(("first", "second"), [("a100", "A100"), ("a100_80g", "A100-80G"), ("x", "a100-40gb")])
def test_an_alias_claimed_by_two_models_is_an_error_naming_both(tmp_path: Path, first: str, second: str) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG % {"first": first, "second": second})
    with pytest.raises(CatalogError, match=r"models: .*claimed by two models, A100-40GB and A100-80GB") as caught:
        load_catalog(path)
    assert str(path) in str(caught.value)


def test_a_site_copy_moves_an_ambiguous_alias(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG % {"first": "a100", "second": "a100_80g"})
    catalog = load_catalog(path)
    assert catalog.model_for("A100") == "A100-40GB"
    assert catalog.model_for("a100-80g") == "A100-80GB"
    assert catalog.model_for("NVIDIA A100-SXM4-80GB") == "A100-80GB"  # match expressions still apply
