"""Price catalogs imported into the database: the newest import is in force, else the configured file.

``gpu-finops prices import FILE`` (or ``PUT /api/v1/prices``) validates a catalog (finops/pricing/catalog.py rules) and
stores its YAML text; nothing invalid is stored. Ledger hours from the earliest date the new catalog prices
differently from the one in force are marked dirty, so the next rollup re-prices exactly those (a catalog
whose currency, tariff or PUE changed re-prices everything). Each import is written to the audit log
(:mod:`finops.access.audit`) with a summary of the catalogs before and after, not their YAML.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, date, datetime, time
from functools import lru_cache
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from finops.access import audit
from finops.db.hours import hours_between, mark_hours_repriced
from finops.db.models import Gpu, PriceCatalogVersion
from finops.pricing.catalog import GpuModel, PriceCatalog, Pricing, parse_catalog
from finops.timeutil import utc_now

_parsed = lru_cache(maxsize=1)(parse_catalog)
""":func:`finops.pricing.catalog.parse_catalog` remembering the catalog in force: its YAML is validated once per
process."""


def catalog_in_force(session: Session, fallback: PriceCatalog) -> PriceCatalog:
    """The newest imported catalog, or ``fallback`` (the configured file) when none was imported. One indexed
    lookup of the newest version per call; the same YAML text is validated once per process."""
    newest = _newest(session)
    return fallback if newest is None else _parsed(newest.body, newest.source)


def _newest(session: Session) -> Row[int, str, str] | None:
    """``(id, source, body)`` of the newest imported catalog, None when none was imported."""
    return session.execute(
        select(PriceCatalogVersion.id, PriceCatalogVersion.source, PriceCatalogVersion.body)
        .order_by(PriceCatalogVersion.id.desc())
        .limit(1)
    ).first()


def pricing_in_force(session: Session, configured: Pricing) -> Pricing:
    """``configured`` with its catalog replaced by the newest imported one, if any."""
    return replace(configured, catalog=catalog_in_force(session, configured.catalog))


def earliest_change(old: PriceCatalog, new: PriceCatalog) -> date | None:
    """The first date from which ``new`` can price a GPU-hour differently from ``old``; None if it cannot.

    A changed currency, tariff or PUE counts from the earliest row of either catalog; a model added, removed,
    re-matched or given other aliases from its earliest row; otherwise the earliest row added, removed or changed.
    """
    every = [row.effective_from for catalog in (old, new) for model in catalog.models.values() for row in model.prices]
    if (old.currency, old.tariff_per_kwh, old.pue) != (new.currency, new.tariff_per_kwh, new.pue):
        return min(every)
    changed: list[date] = []
    for key in old.models.keys() | new.models.keys():
        before, after = old.models.get(key), new.models.get(key)
        if before is None or after is None or (before.match, before.aliases) != (after.match, after.aliases):
            model = before or after
            assert model is not None
            changed.extend(row.effective_from for row in model.prices)
            continue
        rows_before, rows_after = _priced_rows(before), _priced_rows(after)
        changed.extend(
            d for row, d in (rows_before | rows_after).items() if (row in rows_before) != (row in rows_after)
        )
    return min(changed, default=None)


def _priced_rows(model: GpuModel) -> dict[str, date]:
    """A model's rows as comparable text (their cited sources left out) → effective date."""
    return {row.model_dump_json(exclude={"sources"}): row.effective_from for row in model.prices}


def import_catalog(session: Session, text: str, source: str, fallback: PriceCatalog, *, actor: str) -> date | None:
    """Validate and store catalog YAML ``text`` (CatalogError naming ``source`` and the field if invalid; nothing is
    written then), mark the ledger hours it re-prices dirty (as re-priced: their idle episodes are re-priced, not
    judged again: :func:`finops.db.hours.mark_hours_repriced`), and return the date they start from (None: nothing
    changes).

    Audited as ``prices.import`` by ``actor``: before, the catalog that was in force, after, the new one
    (version, source, sha256 of its YAML, currency, models, rows), with ``repriced_from`` (ISO date or None)."""
    new = parse_catalog(text, source)
    newest = _newest(session)
    if newest is None:
        old, before = fallback, _summary(fallback)
    else:
        old = _parsed(newest.body, newest.source)
        before = _summary(old, newest.id, newest.source, newest.body)
    changed_from = earliest_change(old, new)
    version = PriceCatalogVersion(imported_at=utc_now(), source=source[:1024], body=text)
    session.add(version)
    session.flush()
    first_gpu = session.scalar(select(func.min(Gpu.in_service_from)))
    if changed_from is not None and first_gpu is not None:
        start = max(first_gpu, datetime.combine(changed_from, time(), UTC))
        mark_hours_repriced(session, hours_between(start, utc_now()))
    after = {
        **_summary(new, version.id, version.source, text),
        "repriced_from": None if changed_from is None else changed_from.isoformat(),
    }
    audit.record(session, actor, "prices.import", f"price catalog {source}", before, after)
    return changed_from


def _summary(
    catalog: PriceCatalog, version: int | None = None, source: str | None = None, body: str | None = None
) -> dict[str, Any]:
    """What the audit log keeps of a catalog: ``version`` (its id in ``price_catalogs``; None: the configured file,
    not imported), ``source``, ``sha256`` of its YAML ``body`` (None without one), ``currency``, how many
    ``models`` and price ``rows``."""
    return {
        "version": version,
        "source": source,
        "sha256": None if body is None else hashlib.sha256(body.encode()).hexdigest(),
        "currency": catalog.currency,
        "models": len(catalog.models),
        "rows": sum(len(model.prices) for model in catalog.models.values()),
    }
