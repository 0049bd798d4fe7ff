"""What every figure of the price catalog is built from: an exact decimal (never a float) and the public source it
was read from (:class:`Source`). Shared by the price rows (:mod:`finops.pricing.catalog`) and the peak throughput
figures (:mod:`finops.pricing.peaks`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


def no_float(value: object) -> object:
    """Reject floats: a figure must reach Decimal from its text, never through binary floating point."""
    if isinstance(value, float):
        raise ValueError(f"{value!r} is a float; give the amount as decimal text")
    return value


class Source(BaseModel):
    """Where a figure was read: a public URL and a short note of what it says.

    ``estimate`` (default false) marks a figure the source does not state as such: this catalogue's own estimate, a
    figure as recalled, or one whose date or unit the source leaves open. The note says what was assumed; replace it
    with your own figure.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://\S+$")
    note: str = Field(min_length=1)
    estimate: bool = False
