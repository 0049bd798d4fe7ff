"""Display helpers shared by the pages."""

from __future__ import annotations

from decimal import Decimal


def money(amount: Decimal, currency: str) -> str:
    """``1,234.57 USD`` (rounded half-even to cents)."""
    return f"{amount.quantize(Decimal('0.01')):,} {currency}".strip()
