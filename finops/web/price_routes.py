"""The price catalog and pricing rules under ``/api/v1`` (included by :func:`finops.web.rest.create_router`):
``GET /prices`` (the catalog in force, its rows' rates, which rest on an estimate, and the models left unpriced),
``PUT /prices`` (import a catalog, admin), and ``GET``/``PUT``/``DELETE /pricing-rules`` (which nodes bill under
which pricing model)."""

from datetime import date
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import StringConstraints
from sqlalchemy.orm import Session, sessionmaker

from finops.access.api_tokens import Principal
from finops.pricing.catalog import CatalogError, OnPremRow, PriceCatalog, PricingModel
from finops.pricing.rules import delete_pricing_rule, list_pricing_rules, set_pricing_rule
from finops.pricing.store import catalog_in_force, import_catalog
from finops.web.auth import ApiAuth
from finops.web.deps import InputModel, transaction, unprocessable

RULE_KEY_MAX_LENGTH = 253
"""Longest label name of a team or pricing rule (characters): the width of ``team_rules.key`` and
``pricing_rules.key`` (a Kubernetes label prefix is a DNS subdomain of up to 253)."""
RULE_VALUE_MAX_LENGTH = 255
"""Longest value of a team or pricing rule (characters): the width of ``team_rules.value`` and
``pricing_rules.value``."""
# StringConstraints, not Field: they hold in a body model and in a Query() alike.
RuleKey = Annotated[str, StringConstraints(max_length=RULE_KEY_MAX_LENGTH)]
RuleValue = Annotated[str, StringConstraints(min_length=1, max_length=RULE_VALUE_MAX_LENGTH)]


class PricingRuleIn(InputModel):
    """A pricing rule: ``selector`` node|node_label|partition, ``key`` the label name (node_label only; up to
    :data:`RULE_KEY_MAX_LENGTH` characters), ``value`` (up to :data:`RULE_VALUE_MAX_LENGTH`)."""

    selector: Literal["node", "node_label", "partition"]
    key: RuleKey = ""
    value: RuleValue
    pricing_model: PricingModel


def price_router(sessions: sessionmaker[Session], auth: ApiAuth, fallback_catalog: PriceCatalog) -> APIRouter:
    """The price routes on ``sessions``, authenticated by ``auth``; ``fallback_catalog`` is in force until a catalog
    is imported."""
    router = APIRouter()
    reader = Annotated[Principal, Depends(auth.reader)]
    admin = Annotated[Principal, Depends(auth.admin)]
    db = Annotated[Session, Depends(transaction(sessions), scope="function")]

    @router.get("/prices")
    def prices(db: db, caller: reader) -> dict[str, Any]:
        """The price catalog in force (newest import, else the configured file), with every row's rate per
        GPU-hour (on-prem rows computed from their parts), its sources and whether one of them is an estimate
        (``estimate: true``), and the models without a price row (``unpriced_models``: their hours are unpriced)."""
        catalog = catalog_in_force(db, fallback_catalog)
        rows = []
        for key, model in sorted(catalog.models.items()):
            for row in model.prices:
                rate = catalog.parts_of(row).total if isinstance(row, OnPremRow) else row.rate
                rows.append(
                    {
                        "model": key,
                        "pricing_model": str(row.pricing_model),
                        "effective_from": row.effective_from.isoformat(),
                        "rate_per_gpu_hour": str(rate),
                        "sources": [source.url for source in row.sources],
                        "estimate": any(source.estimate for source in row.sources),
                    }
                )
        return {
            "currency": catalog.currency,
            "tariff_per_kwh": str(catalog.tariff_per_kwh),
            "pue": str(catalog.pue),
            "rows": rows,
            "unpriced_models": sorted(key for key, model in catalog.models.items() if not model.prices),
        }

    @router.put("/prices")
    async def put_prices(request: Request, caller: admin) -> dict[str, str | None]:
        """Import a catalog: the request body is its YAML (``finops/pricing/price_catalog.yaml`` format). 422 naming the
        field if invalid, or the bound passed (size, nesting, nodes, models: :mod:`finops.pricing.catalog_yaml`);
        otherwise the date the ledger is re-priced from (null: nothing changed). Parsed and stored in a worker
        thread, so that the service answers other requests meanwhile."""
        text = (await request.body()).decode("utf-8", errors="replace")

        def store() -> date | None:
            with unprocessable(CatalogError), sessions.begin() as opened:
                return import_catalog(opened, text, "PUT /api/v1/prices", fallback_catalog, actor=caller.actor)

        changed_from = await anyio.to_thread.run_sync(store)
        return {"repriced_from": None if changed_from is None else changed_from.isoformat()}

    @router.get("/pricing-rules")
    def pricing_rules(db: db, caller: reader) -> list[PricingRuleIn]:
        """Pricing rules in resolution order (node, node_label, partition)."""
        return [
            PricingRuleIn(selector=r.selector, key=r.key, value=r.value, pricing_model=r.pricing_model)
            for r in list_pricing_rules(db)
        ]

    @router.put("/pricing-rules", status_code=204)
    def put_pricing_rule(db: db, caller: admin, rule: PricingRuleIn) -> Response:
        """Bill the selected nodes' GPUs under a pricing model (the ledger is re-priced on the next rollup)."""
        with unprocessable():
            set_pricing_rule(db, rule.selector, rule.key, rule.value, rule.pricing_model, actor=caller.actor)
        return Response(status_code=204)

    @router.delete("/pricing-rules/{selector}", status_code=204)
    def remove_pricing_rule(
        db: db,
        caller: admin,
        selector: str,
        value: Annotated[RuleValue, Query()],
        key: Annotated[RuleKey, Query()] = "",
    ) -> Response:
        """Remove a pricing rule."""
        with unprocessable():
            delete_pricing_rule(db, selector, key, value, actor=caller.actor)
        return Response(status_code=204)

    return router
