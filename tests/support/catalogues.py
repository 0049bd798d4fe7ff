"""Price catalogues of any number of models, in the packaged catalogue's format, for the catalogue's bounds."""

from __future__ import annotations

SOURCE = "{url: 'https://example.com/prices', note: 'list price'}"


def catalogue(models: int, *, described: bool = True) -> str:
    """A catalogue of ``models`` models ``M0``, ``M1``…, each with one on-demand row; ``described=False`` leaves
    out each model's (required) ``description``."""
    lines = [
        "currency: USD", "tariff_per_kwh: 0.08", f"tariff_source: {SOURCE}", "pue: 1.5", f"pue_source: {SOURCE}",
        "models:",
    ]  # fmt: skip
    for n in range(models):
        lines += [f"  M{n}:", *([f"    description: model {n}"] if described else [])]
        lines += [
            f"    match: ['^m{n}$']", f"    aliases: [m{n}]", "    prices:", "      - pricing_model: on-demand",
            "        effective_from: 2024-01-01", "        rate: 1.5", f"        sources: [{SOURCE}]",
        ]  # fmt: skip
    return "\n".join(lines) + "\n"
