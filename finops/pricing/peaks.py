"""A GPU model's dense peak throughput per precision, in TFLOPS, from its datasheet: the denominator of model FLOPs
utilisation (:mod:`finops.analysis.mfu`).

Precision names (:data:`PRECISIONS`) follow the datasheets' rows: ``fp64``, ``fp32`` (the vector/CUDA-core rates),
``fp64_tensor``, ``tf32_tensor``, ``bf16_tensor``, ``fp16_tensor``, ``fp8_tensor``, ``int8_tensor`` (NVIDIA's Tensor
Cores, AMD's Matrix Cores). ``int8_tensor`` is in tera-operations per second (TOPS), the others in TFLOPS.

Dense figures only. NVIDIA's H100, H200, B200 and L40S datasheets print their Tensor Core figures "with sparsity"
(2:4 structured sparsity, marked with an asterisk), twice what a dense matrix product can reach: the catalog holds
half of them and its source note says so. A figure no datasheet gives is left out (absent, never guessed), and a key
that names a sparse figure is refused.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from finops.pricing.sources import Source, no_float

Precision = Literal[
    "fp64", "fp64_tensor", "fp32", "tf32_tensor", "bf16_tensor", "fp16_tensor", "fp8_tensor", "int8_tensor"
]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
"""The precision names a model's ``peak_tflops`` may give, in the datasheets' order."""

Tflops = Annotated[Decimal, BeforeValidator(no_float), Field(gt=0, allow_inf_nan=False)]
"""A peak throughput: a positive, finite number of TFLOPS (TOPS for ``int8_tensor``), exact."""


class PeakTflops(BaseModel):
    """A model's dense peak TFLOPS per precision (each optional: only what the datasheet gives), and where they were
    read. At least one figure; a name outside :data:`PRECISIONS` or naming a sparse figure is a ValueError that says
    which."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fp64: Tflops | None = None
    fp64_tensor: Tflops | None = None
    fp32: Tflops | None = None
    tf32_tensor: Tflops | None = None
    bf16_tensor: Tflops | None = None
    fp16_tensor: Tflops | None = None
    fp8_tensor: Tflops | None = None
    int8_tensor: Tflops | None = None
    source: Source

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name in data:
            if name == "source" or name in PRECISIONS:
                continue
            if "spars" in str(name):
                raise ValueError(
                    f"{name!r}: dense figures only; give the dense one (half a 'with sparsity' datasheet figure) "
                    f"under its precision name"
                )
            raise ValueError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}")
        if not any(data.get(name) is not None for name in PRECISIONS):
            raise ValueError(f"no figure: give at least one of {', '.join(PRECISIONS)}")
        return data

    def of(self, precision: Precision) -> Decimal | None:
        """The dense peak of ``precision`` in TFLOPS (TOPS for ``int8_tensor``); None when the datasheet gives none.
        ValueError for a name outside :data:`PRECISIONS`."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        value: Decimal | None = getattr(self, precision)
        return value

    def figures(self) -> dict[Precision, Decimal]:
        """The figures given, by precision, in :data:`PRECISIONS` order."""
        return {name: value for name in PRECISIONS if (value := self.of(name)) is not None}
