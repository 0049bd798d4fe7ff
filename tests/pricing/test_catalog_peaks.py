"""The price catalog's dense peak TFLOPS (finops/pricing/peaks.py): the packaged figures are dense halves of the
datasheets' sparse ones where the datasheet prints sparse, optional per model, and bad figures are refused naming the
model and the field."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from finops.pricing.catalog import CatalogError, PriceNotFound, PricingModel, load_catalog
from finops.pricing.peaks import PRECISIONS

MODEL = """\
currency: USD
tariff_per_kwh: 0.1
tariff_source: {url: "https://example.com/tariff", note: tariff}
pue: 1.5
pue_source: {url: "https://example.com/pue", note: pue}
models:
  X1:
    description: test GPU
    match: ['\\\\bX1\\\\b']
%s    prices:
      - pricing_model: spot
        effective_from: 2025-01-01
        rate: 1
        sources: [{url: "https://example.com/x1", note: x1}]
"""
SOURCE = '{url: "https://example.com/datasheet", note: "datasheet, dense"}'


def _load(tmp_path: Path, block: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "catalog.yaml"
    path.write_text(MODEL % block)
    return load_catalog(path)


def test_packaged_peaks_are_the_dense_figures() -> None:
    models = load_catalog().models
    h100 = models["H100-SXM-80GB"].peak_tflops
    assert h100 is not None
    # NVIDIA prints BF16 1,979 and FP8 3,958 "with sparsity": the catalog holds half; FP64 is printed dense.
    assert (h100.of("bf16_tensor"), h100.of("fp8_tensor"), h100.of("fp64")) == (Decimal("989.5"), 1979, 34)
    a100 = models["A100-SXM4-80GB"].peak_tflops
    assert a100 is not None and a100.of("bf16_tensor") == 312 and a100.of("fp8_tensor") is None, "A100 has no FP8"
    mi250x = models["MI250X"].peak_tflops
    assert mi250x is not None and mi250x.of("fp16_tensor") == Decimal("191.5"), "383 per module, priced per GCD"
    for key, model in models.items():
        peaks = model.peak_tflops
        assert peaks is not None, f"{key}: every packaged model has a datasheet"
        assert "dense" in peaks.source.note or "halved" in peaks.source.note, key
        figures = peaks.figures()
        assert list(figures) == [name for name in PRECISIONS if name in figures]
        if "fp16_tensor" in figures and "bf16_tensor" in figures:
            assert figures["fp16_tensor"] == figures["bf16_tensor"], f"{key}: FP16 and BF16 share a peak"
        if "fp8_tensor" in figures and "bf16_tensor" in figures:
            gap = abs(figures["fp8_tensor"] - 2 * figures["bf16_tensor"])
            assert gap <= figures["fp8_tensor"] / 1000, f"{key}: FP8 doubles BF16 (AMD rounds: 2,614.9 = 2 × 1,307.4)"


def test_a_model_without_peaks_and_one_with_some(tmp_path: Path) -> None:
    assert _load(tmp_path, "").models["X1"].peak_tflops is None
    peaks = _load(tmp_path, f"    peak_tflops: {{bf16_tensor: 989.5, source: {SOURCE}}}\n").models["X1"].peak_tflops
    assert peaks is not None and peaks.of("bf16_tensor") == Decimal("989.5") and peaks.of("fp64") is None
    assert peaks.figures() == {"bf16_tensor": Decimal("989.5")}
    with pytest.raises(ValueError, match="unknown precision 'fp4'"):
        peaks.of("fp4")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (f"    peak_tflops: {{bf16_tensor: 0, source: {SOURCE}}}\n",
         r"models\.X1\.peak_tflops\.bf16_tensor: Input should be greater than 0"),
        (f"    peak_tflops: {{bf16_tensor: -989.5, source: {SOURCE}}}\n",
         r"models\.X1\.peak_tflops\.bf16_tensor: Input should be greater than 0"),
        (f"    peak_tflops: {{fp64: .inf, source: {SOURCE}}}\n", r"models\.X1\.peak_tflops\.fp64: "),
        (f"    peak_tflops: {{fp64: lots, source: {SOURCE}}}\n", r"models\.X1\.peak_tflops\.fp64: .*\(got 'lots'\)"),
        (f"    peak_tflops: {{fp4_tensor: 9000, source: {SOURCE}}}\n",
         r"models\.X1\.peak_tflops: Value error, unknown precision 'fp4_tensor'; known: fp64, fp64_tensor"),
        (f"    peak_tflops: {{bf16_tensor_sparse: 1979, source: {SOURCE}}}\n",
         r"models\.X1\.peak_tflops: Value error, 'bf16_tensor_sparse': dense figures only"),
        (f"    peak_tflops: {{source: {SOURCE}}}\n", r"models\.X1\.peak_tflops: Value error, no figure"),
        ("    peak_tflops: {bf16_tensor: 989.5}\n", r"models\.X1\.peak_tflops\.source: Field required"),
    ],
)  # fmt: skip
def test_bad_peaks_are_refused_naming_the_model_and_field(tmp_path: Path, block: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as caught:
        _load(tmp_path, block)
    assert str(tmp_path / "catalog.yaml") in str(caught.value)


def test_mi250_and_mi210_rows() -> None:
    """AMD's figures (ROCm documentation: the MI250 page's OAM table, halved per GCD; the GPU specifications table's
    memory); the MI210's peaks are one such die at the MI250's clock, an estimate that says so (no AMD source read
    states the MI210's clock); the MI210 has no price row: unpriced, never a
    guessed rate."""
    catalog = load_catalog()
    mi250, mi210 = catalog.models["MI250"], catalog.models["MI210"]
    assert mi250.memory is not None and mi250.memory.gib == 64 and mi210.memory is not None and mi210.memory.gib == 64
    assert mi250.peak_tflops is not None and mi210.peak_tflops is not None
    assert mi250.peak_tflops.of("fp64") * 2 == Decimal("45.3") and mi250.peak_tflops.of("bf16_tensor") * 2 == Decimal(
        "362.1"
    )
    assert mi250.peak_tflops.of("fp64_tensor") == Decimal("45.25") and not mi250.peak_tflops.source.estimate
    assert mi210.peak_tflops.of("fp64_tensor") == Decimal("45.3") and mi210.peak_tflops.source.estimate
    assert [row.sources[0].estimate for row in mi250.prices] == [True]  # an undated listing
    assert mi210.prices == [] and catalog.resolve("AMD Instinct MI210") == "MI210"
    with pytest.raises(PriceNotFound, match="no on-demand price for MI210"):
        catalog.rate("AMD Instinct MI210", PricingModel.ON_DEMAND, datetime(2026, 3, 1, tzinfo=UTC))


def test_mi300x_and_mi250x_peaks() -> None:
    """The MI300X's figures are AMD's own table (ROCm documentation, MI300 microarchitecture), not an estimate; the
    MI250X's, per GCD, are 110 CUs x AMD's CDNA 2 FLOPS per clock per CU x 1.7 GHz, an estimate (no AMD source read
    states the MI250X's clock), half of the module's 47.9 / 95.7 / 383."""
    models = load_catalog().models
    mi300x, mi250x = models["MI300X"].peak_tflops, models["MI250X"].peak_tflops
    assert mi300x is not None and mi250x is not None
    assert (mi300x.of("fp64"), mi300x.of("fp64_tensor"), mi300x.of("bf16_tensor")) == (
        Decimal("81.7"), Decimal("163.4"), Decimal("1307.4"),
    )  # fmt: skip
    assert mi300x.of("int8_tensor") == mi300x.of("fp8_tensor") == Decimal("2614.9")
    assert not mi300x.source.estimate and mi300x.source.url.startswith("https://rocm.docs.amd.com/")
    for precision, per_cu in (("fp64", 128), ("fp64_tensor", 256), ("bf16_tensor", 1024), ("int8_tensor", 1024)):
        figure = mi250x.of(precision)
        assert figure is not None and abs(float(figure) - 110 * per_cu * 1.7e9 / 1e12) < 0.05, precision
    assert mi250x.source.estimate
