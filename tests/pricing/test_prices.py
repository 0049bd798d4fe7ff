"""The packaged price catalog and its loader: rates, effective dating, on-prem formula, NVML names, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal, localcontext
from pathlib import Path

import pytest
from pydantic import ValidationError

from finops.pricing.catalog import CatalogError, PriceCatalog, PriceNotFound, PricingModel, RateRow, load_catalog

H100 = "NVIDIA H100 80GB HBM3"

# One GPU per model the catalog must cover, by its NVML product name, and the catalog key it maps to.
REQUIRED = {
    H100: "H100-SXM-80GB",
    "NVIDIA H200": "H200",
    "NVIDIA B200": "B200",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA L40S": "L40S",
    "AMD Instinct MI300X": "MI300X",
}


@pytest.fixture(scope="module")
def catalog() -> PriceCatalog:
    return load_catalog()


def _latest_start(catalog: PriceCatalog) -> datetime:
    return max(row.starts for model in catalog.models.values() for row in model.prices)


def test_packaged_catalog_loads_with_exact_settings(catalog: PriceCatalog) -> None:
    assert catalog.currency == "USD"
    assert catalog.tariff_per_kwh == Decimal("0.0804")
    assert catalog.pue == Decimal("1.56")
    assert set(REQUIRED.values()) <= set(catalog.models)


@pytest.mark.parametrize("gpu_name", REQUIRED)
@pytest.mark.parametrize("pricing_model", list(PricingModel))
def test_every_required_model_has_every_pricing_model(
    catalog: PriceCatalog, gpu_name: str, pricing_model: PricingModel
) -> None:
    rate = catalog.rate(gpu_name, pricing_model, _latest_start(catalog) + timedelta(days=1))
    assert isinstance(rate, Decimal)
    assert rate > 0


def test_every_row_cites_a_source(catalog: PriceCatalog) -> None:
    for model in catalog.models.values():
        for row in model.prices:
            assert row.sources
            assert all(source.url.startswith("https://") and source.note for source in row.sources)


def test_effective_dating_picks_the_row_in_force(catalog: PriceCatalog) -> None:
    """AWS cut the P5 price on 2025-06-01: $98.32 -> $55.04 per 8 GPUs."""
    cut = datetime(2025, 6, 1, tzinfo=UTC)
    assert catalog.rate(H100, PricingModel.ON_DEMAND, cut - timedelta(seconds=1)) == Decimal("12.29")
    assert catalog.rate(H100, PricingModel.ON_DEMAND, cut) == Decimal("6.88")
    assert catalog.rate(H100, PricingModel.ON_DEMAND, datetime(2030, 1, 1, tzinfo=UTC)) == Decimal("6.88")
    # 01:00 at UTC+2 on the day of the cut is still 23:00 UTC the day before.
    before_in_utc = datetime(2025, 6, 1, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    assert catalog.rate(H100, PricingModel.ON_DEMAND, before_in_utc) == Decimal("12.29")


def test_no_row_in_force_raises_price_not_found_naming_what_was_asked(catalog: PriceCatalog) -> None:
    with pytest.raises(PriceNotFound, match=r"on-demand price for H100-SXM-80GB .* 2023-07-25T23:59:59\+00:00"):
        catalog.rate(H100, PricingModel.ON_DEMAND, datetime(2023, 7, 25, 23, 59, 59, tzinfo=UTC))
    assert issubclass(PriceNotFound, LookupError)


def test_naive_time_is_refused(catalog: PriceCatalog) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        catalog.rate(H100, PricingModel.ON_DEMAND, datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test


def test_onprem_rate_is_the_formula_on_the_h100_parts(catalog: PriceCatalog) -> None:
    """capex / (years * 8760) + kW * tariff * PUE + support / 8760, with the H100 row's figures."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    capex = Decimal(27500) / (Decimal(5) * Decimal(8760))
    energy = Decimal(700) / Decimal(1000) * Decimal("0.0804") * Decimal("1.56")
    support = Decimal(4500) / Decimal(8760)
    parts = catalog.onprem_parts(H100, at)
    assert (parts.capex_per_hour, parts.energy_per_hour, parts.support_per_hour) == (capex, energy, support)
    assert parts.energy_per_hour == Decimal("0.0877968")  # exact: no float anywhere on the way
    assert catalog.rate(H100, PricingModel.ON_PREM, at) == capex + energy + support
    assert str(catalog.rate(H100, PricingModel.ON_PREM, at).quantize(Decimal("0.000001"))) == "1.229349"
    with localcontext() as context:  # the caller's decimal context does not change the result
        context.prec = 6
        assert catalog.rate(H100, PricingModel.ON_PREM, at) == parts.total


@pytest.mark.parametrize(("gpu_name", "key"), [*REQUIRED.items(), ("nvidia h100 80gb hbm3", "H100-SXM-80GB")])
def test_nvml_names_match_their_model(catalog: PriceCatalog, gpu_name: str, key: str) -> None:
    assert catalog.model_for(gpu_name) == key


@pytest.mark.parametrize(
    "gpu_name",
    [
        "NVIDIA A100-SXM4-40GB",  # not the 80GB part
        "NVIDIA GB200",  # not B200
        "NVIDIA L40",  # not L40S
        "NVIDIA H100 PCIe",  # 350 W card, priced differently from SXM
        "NVIDIA H200 NVL",
        "AMD Instinct MI300A",
        "Tesla T4",
    ],
)
def test_other_gpus_match_no_model(catalog: PriceCatalog, gpu_name: str) -> None:
    with pytest.raises(PriceNotFound, match="no price catalog model matches"):
        catalog.model_for(gpu_name)


def test_h100_is_not_taken_for_h200(catalog: PriceCatalog) -> None:
    assert not catalog.models["H200"].matches(H100)
    assert not catalog.models["H100-SXM-80GB"].matches("NVIDIA H200")


def test_money_is_decimal_never_float(catalog: PriceCatalog) -> None:
    for model in catalog.models.values():
        for row in model.prices:
            for name, value in row.model_dump().items():
                assert not isinstance(value, float), f"{name} is a float"
    rate = catalog.rate("NVIDIA A100-SXM4-80GB", PricingModel.ON_DEMAND, datetime(2024, 1, 1, tzinfo=UTC))
    assert rate == Decimal("5.1207125")  # 40.9657 / 8, exactly as written in the YAML
    with pytest.raises(ValidationError, match="is a float"):
        RateRow.model_validate(
            {"pricing_model": "spot", "effective_from": "2026-01-01", "rate": 0.1,
             "sources": [{"url": "https://example.com", "note": "n"}]}
        )  # fmt: skip


CATALOG = """\
currency: USD
tariff_per_kwh: 0.1
tariff_source: {url: "https://example.com/tariff", note: tariff}
pue: 1.5
pue_source: {url: "https://example.com/pue", note: pue}
models:
  X1:
    description: test GPU
    match: ['\\bX1\\b']
    prices:
      - pricing_model: %(pricing_model)s
        effective_from: 2025-01-01
        rate: %(rate)s
        sources: [{url: "https://example.com/x1", note: x1}]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    return path


def test_a_small_catalog_loads_decimal_text_exactly(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, CATALOG % {"pricing_model": "spot", "rate": "0.1"}))
    rate = catalog.rate("Vendor X1", PricingModel.SPOT, datetime(2025, 1, 1, tzinfo=UTC))
    assert rate == Decimal("0.1")  # float 0.1 would be 0.1000000000000000055511151231257827...
    assert isinstance(catalog.tariff_per_kwh, Decimal)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"pricing_model": "spot", "rate": "-1.5"}, r"models\.X1\.prices\[0\]\.rate: Input should be greater than"),
        ({"pricing_model": "spot", "rate": ".inf"}, r"models\.X1\.prices\[0\]\.rate"),
        ({"pricing_model": "spot", "rate": "cheap"}, r"models\.X1\.prices\[0\]\.rate"),
        ({"pricing_model": "ondemand", "rate": "1"}, r"models\.X1\.prices\[0\]\.pricing_model: Input should be 'on-d"),
    ],
)
def test_malformed_catalog_error_names_the_file_and_field(tmp_path: Path, values: dict[str, str], field: str) -> None:
    path = _write(tmp_path, CATALOG % values)
    with pytest.raises(CatalogError, match=field) as caught:
        load_catalog(path)
    assert str(path) in str(caught.value)


def test_missing_field_and_unknown_field_are_named(tmp_path: Path) -> None:
    text = CATALOG.replace("pue: 1.5\n", "").replace("currency: USD\n", "currency: USD\nregion: mars\n")
    with pytest.raises(CatalogError, match=r"pue: Field required.*region: Extra inputs are not permitted"):
        load_catalog(_write(tmp_path, text % {"pricing_model": "spot", "rate": "1"}))


def test_bad_match_expression_is_named(tmp_path: Path) -> None:
    text = (CATALOG % {"pricing_model": "spot", "rate": "1"}).replace("\\bX1\\b", "(X1")
    with pytest.raises(CatalogError, match=r"models\.X1\.match: .*'\(X1' is not a valid regular expression"):
        load_catalog(_write(tmp_path, text))


def test_onprem_row_needs_its_parts(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"prices\[0\]\.capex_usd: Field required"):
        load_catalog(_write(tmp_path, CATALOG % {"pricing_model": "on-prem", "rate": "1"}))


def test_yaml_syntax_error_and_duplicate_key_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"catalog\.yaml: invalid YAML"):
        load_catalog(_write(tmp_path, "models: [\n"))
    duplicate = CATALOG.replace("pue: 1.5\n", "pue: 1.5\npue: 1.2\n")
    with pytest.raises(CatalogError, match="duplicate key 'pue'"):
        load_catalog(_write(tmp_path, duplicate % {"pricing_model": "spot", "rate": "1"}))
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.yaml")


def test_a_name_matching_two_models_is_not_priced(tmp_path: Path) -> None:
    one = CATALOG % {"pricing_model": "spot", "rate": "1"}
    both = one + one[one.index("  X1:") :].replace("X1:", "X2:", 1).replace("\\bX1\\b", "X")
    catalog = load_catalog(_write(tmp_path, both))
    with pytest.raises(PriceNotFound, match="matches several price catalog models: X1, X2"):
        catalog.model_for("Vendor X1")
