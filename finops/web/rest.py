"""The REST API under ``/api/v1`` (FastAPI router): costs (by group, and idle cost by waste reason), commitments,
budgets, idle episodes, right-sizing, efficiency (:mod:`finops.web.efficiency_routes`), events, team rules, the price
catalog and pricing rules (:mod:`finops.web.price_routes`).

Every route needs ``Authorization: Bearer <token>``, an API token or ``FINOPS_API_TOKEN``
(:class:`finops.web.auth.ApiAuth`): reading needs any role, and a ``team`` token reads only its team's costs,
budgets, idle episodes, events and team rules; the commitments, fleet-wide, need a ``viewer`` or ``admin`` token;
changing needs an ``admin`` token (403 otherwise), and so does the audit log. Money is a decimal string (exact, 6
decimals in the ledger; cost reports round to cents so rows add up to the total); times are ISO 8601 UTC; periods
are [start, end). Errors are JSON ``{"detail": "…"}`` naming the offending parameter, with 400/404/422 as FastAPI
gives them; a budget refused answers 422 as FastAPI's own validation does, ``{"detail": [{"type", "loc", "msg"}]}``
with the field's place.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session, sessionmaker

from finops.access.api_tokens import Principal
from finops.access.audit import ACTOR_MAX_LENGTH, DEFAULT_LIMIT, MAX_LIMIT, list_entries
from finops.analysis.budgets import (
    MAX_NAME,
    BudgetError,
    UnknownTeam,
    budget_status,
    delete_budget,
    parse_month,
    set_budget,
)
from finops.analysis.events import EVENT_KINDS, list_events
from finops.analysis.idle import list_episodes
from finops.analysis.price_estimates import estimated_prices
from finops.analysis.report import GroupBy, cost_report, unpriced_by_model
from finops.analysis.report_format import report_csv, report_dicts
from finops.analysis.waste import ReasonPolicy
from finops.db.models import TEAM_RULE_KINDS
from finops.jobs.teams import delete_rule, list_rules, precedence, set_precedence, set_rule
from finops.pricing.catalog import PriceCatalog, load_catalog
from finops.pricing.store import catalog_in_force
from finops.savings.commitments import DEFAULT_DAYS, MAX_DAYS, MAX_MODEL_LENGTH, MAX_QUANTITY, commitment_report
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_policy import MAX_MEMORY_HEADROOM, RightsizingPolicy
from finops.savings.rightsizing_report import rightsizing_csv, rightsizing_dicts
from finops.savings.waste_costs import waste_report
from finops.savings.waste_tables import job_dicts, reason_csv, reason_dicts
from finops.timeutil import month_start, next_month_start, utc_now
from finops.web.auth import ApiAuth, forbidden
from finops.web.conformance import CSV_TOO, NOT_FOUND
from finops.web.cost_schema import CostsOut
from finops.web.deps import AsciiDecimal, InputModel, instant, one_of, transaction, unprocessable
from finops.web.efficiency_routes import efficiency_router
from finops.web.price_routes import RuleKey, RuleValue, price_router

MONTH_HELP = "Month as YYYY-MM (a year from 2000 to 2999)."
_RIGHTSIZING = RightsizingPolicy()
"""The right-sizing thresholds a request does not set."""


class BudgetIn(InputModel):
    """A budget to set: ``amount`` (decimal text or number: more than 0, below 10¹², at most 6 decimals) in
    ``currency`` (ISO 4217), which must be the price catalog's and defaults to it. Checked by
    :func:`finops.analysis.budgets.set_budget`, as on the command line."""

    # Infinity and NaN reach set_budget to be refused there: refused here, FastAPI would fail to render the input.
    amount: Annotated[Decimal, Field(allow_inf_nan=True)] | str = Field(
        description='Decimal number or text, e.g. 25000 or "25000.00".'
    )
    currency: str | None = None


class BudgetOut(BaseModel):
    """A budget's month-to-date status (money as decimal strings; ``spent`` in cents, as the cost report by team
    over the month so far prints it). ``budget`` is in ``currency``, spend and forecast in ``spend_currency``; when
    they differ the budget is not ``comparable``: ``used_percent`` is null and ``problem`` says how to fix it."""

    team: str
    project: str
    month: str
    budget: str
    spent: str
    used_percent: str | None
    forecast: str
    currency: str
    spend_currency: str
    comparable: bool
    problem: str | None


class TeamRuleIn(InputModel):
    """A team rule: ``kind`` account|namespace|label, ``key`` the label name (label rules only; up to
    :data:`RULE_KEY_MAX_LENGTH` characters), ``value`` (up to :data:`RULE_VALUE_MAX_LENGTH`), ``team`` (up to
    :data:`finops.analysis.budgets.MAX_NAME`, the width of ``teams.name``)."""

    kind: Literal["label", "namespace", "account"]
    key: RuleKey = ""
    value: RuleValue
    team: str = Field(min_length=1, max_length=MAX_NAME)


class TeamRulePrecedenceIn(InputModel):
    """The team rule precedence (:data:`finops.db.models.TEAM_RULE_PRECEDENCES`): ``namespace`` (a namespace or
    account rule before a pod's own labels) or ``label`` (labels first)."""

    precedence: Literal["namespace", "label"]


_BUDGET_FIELDS = {"team": "path", "month": "path", "project": "query", "amount": "body", "currency": "body"}
"""Where each field a :class:`~finops.analysis.budgets.BudgetError` names is in a budget route's request."""


@contextmanager
def _budget_refused(**where: str) -> Iterator[None]:
    """Turn a BudgetError raised in the block into 422 with a field-level detail, as FastAPI's own validation
    gives: ``[{"type": "value_error", "loc": [<path|query|body>, <field>], "msg": "…"}]``. ``where`` overrides
    :data:`_BUDGET_FIELDS` for the route (``month="query"``)."""
    try:
        yield
    except BudgetError as exc:
        message = str(exc)
        if isinstance(exc, UnknownTeam):
            message += "; add allow_unknown_team=true to the query to set its budget anyway"
        location = {**_BUDGET_FIELDS, **where}[exc.field]
        raise HTTPException(422, [{"type": "value_error", "loc": [location, exc.field], "msg": message}]) from exc


def create_router(
    sessions: sessionmaker[Session],
    auth: ApiAuth,
    configured_catalog: PriceCatalog | None = None,
    reasons: ReasonPolicy | None = None,
    efficiency: EfficiencyPolicy | None = None,
) -> APIRouter:
    """The ``/api/v1`` routes on ``sessions``, authenticated by ``auth``; ``configured_catalog`` (default: the
    packaged one) is in force until a catalog is imported; ``reasons``: the waste reasons' thresholds (the
    ``FINOPS_WASTE_*`` settings; default: their defaults); ``efficiency``: the bands' and bottlenecks' thresholds
    (``FINOPS_EFFICIENCY_*``; default: their defaults)."""
    fallback_catalog = configured_catalog if configured_catalog is not None else load_catalog()
    reason_policy = reasons or ReasonPolicy()
    router = APIRouter(prefix="/api/v1")
    router.include_router(efficiency_router(sessions, auth, efficiency or EfficiencyPolicy()))
    router.include_router(price_router(sessions, auth, fallback_catalog))
    reader = Annotated[Principal, Depends(auth.reader)]
    fleet_reader = Annotated[Principal, Depends(auth.fleet_reader)]
    admin = Annotated[Principal, Depends(auth.admin)]
    # Evaluated here (this module does not postpone annotations). scope="function": the transaction commits
    # before the response is sent, so a client reading right after a write sees it.
    db = Annotated[Session, Depends(transaction(sessions), scope="function")]

    @router.get(
        "/costs",
        response_model=None,
        responses={200: {"model": CostsOut, "content": {"text/csv": {"schema": {"type": "string"}}}}},
    )
    def costs(
        db: db,
        caller: reader,
        start: Annotated[str, Query(description="Period start, ISO 8601 (UTC if no offset).")],
        end: Annotated[str, Query(description="Period end (exclusive), ISO 8601.")],
        group_by: Annotated[GroupBy, Query(description="team, job, user, node or gpu_model.")] = "team",
        format: Annotated[Literal["json", "csv"], Query(description="json or csv.")] = "json",
    ) -> Any:
        """Cost per group over [start, end) from the hourly ledger, as in ``gpu-finops report`` (by ``gpu_model``,
        one row per price catalog model). GPU-hours whose model has no price are counted, not costed:
        ``unpriced_gpu_hours`` per row (its costs null when all its GPU-hours are unpriced) and, in JSON, ``unpriced``:
        ``[{model, gpu_hours, fix}]``; CSV sends them in the ``X-Unpriced-GPU-Hours`` header (``MODEL=HOURS; …``).
        Prices resting on an estimate (a catalog source marked ``estimate: true``): ``price_estimates``,
        ``[{model, pricing_model, sources, note}]``; CSV: the ``X-Price-Estimates`` header (``MODEL PRICING_MODEL
        URL…; …``).
        Held GPU-hours without a reading: ``unmetered_gpu_hours`` and their share of the held ones,
        ``unmetered_share``; by job, the job's ``state`` as its scheduler last reported it.
        Hardware activity per row: ``sm_active_ratio``, ``tensor_active_ratio``, ``dram_active_ratio``,
        ``sm_active_cost`` and ``profiled_share``, null where nothing measured it (every field:
        :mod:`finops.web.cost_schema`).
        A team token: its team's ledger rows only."""
        period = instant(start, "start"), instant(end, "end")
        team = caller.team_scope
        catalog = catalog_in_force(db, fallback_catalog)
        rows = cost_report(db, *period, group_by, team=team, catalog=catalog)
        unpriced = unpriced_by_model(db, *period, team=team)
        estimates = estimated_prices(db, catalog, *period, team=team)
        if format == "csv":
            headers = {}
            if unpriced:
                headers["X-Unpriced-GPU-Hours"] = "; ".join(f"{u.model}={u.gpu_hours}" for u in unpriced)
            if estimates:
                headers["X-Price-Estimates"] = "; ".join(
                    f"{e.model} {e.pricing_model} {' '.join(e.sources)}" for e in estimates
                )
            return Response(report_csv(rows, group_by), media_type="text/csv", headers=headers or None)
        return {
            "group_by": group_by,
            "start": start,
            "end": end,
            "rows": report_dicts(rows, group_by),
            "unpriced": [{"model": u.model, "gpu_hours": u.gpu_hours, "fix": u.fix} for u in unpriced],
            "price_estimates": [
                {"model": e.model, "pricing_model": e.pricing_model, "sources": list(e.sources), "note": e.note}
                for e in estimates
            ],
        }

    @router.get("/commitments")
    def commitments(
        db: db,
        caller: fleet_reader,
        days: Annotated[int, Query(ge=1, le=MAX_DAYS, description="Whole days before the current hour.")] = (
            DEFAULT_DAYS
        ),
        model: Annotated[
            str | None,
            Query(max_length=MAX_MODEL_LENGTH, description="Only this GPU model (a catalogue model or a name)."),
        ] = None,
        quantity: Annotated[
            int | None, Query(ge=0, le=MAX_QUANTITY, description="What if this many GPUs of each model were committed.")
        ] = None,
    ) -> dict[str, Any]:
        """Per GPU model, the reserved quantity that costs least against the GPUs jobs held in each hour of the last
        ``days`` days, at the catalogue's rates in force now, as ``gpu-finops commitments --format json`` gives it
        (:mod:`finops.savings.commitments`); owned GPUs against renting them on demand; models left out with the
        reason and the fix. Fleet-wide: a team token is refused (403)."""
        catalog = catalog_in_force(db, fallback_catalog)
        return commitment_report(db, catalog, utc_now(), days, model=model, quantity=quantity).as_dict()

    @router.get("/costs/idle-by-reason", response_model=None, responses=CSV_TOO)
    def idle_by_reason(
        db: db,
        caller: reader,
        month: Annotated[str | None, Query(description=MONTH_HELP + " Default: this month.")] = None,
        format: Annotated[Literal["json", "csv"], Query(description="json or csv.")] = "json",
    ) -> Any:
        """Idle cost by probable waste reason per team over month YYYY-MM (default: this month, UTC, so far), as
        ``gpu-finops report --by reason`` (docs/waste-reasons.md): ``rows`` of ``{team, month, reason, title, kind,
        gpu_hours, unpriced_gpu_hours, cost, currency}`` adding up to the idle cost by team plus the allocated cost of
        unmetered GPU-hours (``no_reading``, ``kind`` ``unmetered``: not idle waste), and ``jobs``, the low-utilisation
        jobs with their reason and evidence, costliest first. CSV: the rows. A team token: its team's only. 422 for a
        month that is not one."""
        with _budget_refused(month="query"):
            first = month_start(utc_now()) if month is None else parse_month(month)
        found = waste_report(db, first, next_month_start(first), team=caller.team_scope, policy=reason_policy)
        if format == "csv":
            return Response(reason_csv(found.rows), media_type="text/csv")
        return {"month": f"{first:%Y-%m}", "rows": reason_dicts(found.rows), "jobs": job_dicts(found.jobs)}

    @router.get("/budgets")
    def budgets(
        db: db, caller: reader, month: Annotated[str | None, Query(description=MONTH_HELP)] = None
    ) -> list[BudgetOut]:
        """Every budget of a month (default: this month, UTC) with spend, % used and forecast as of now (a
        past month: as of its end); a team token: its team's only."""
        with _budget_refused(month="query"):
            first = month_start(utc_now()) if month is None else parse_month(month)
        instant = max(first, min(utc_now(), next_month_start(first) - timedelta(seconds=1)))
        return [
            BudgetOut(
                team=s.team,
                project=s.project,
                month=f"{s.month:%Y-%m}",
                budget=str(s.budget),
                spent=str(s.spent),
                used_percent=str(s.used_percent) if s.comparable else None,
                forecast=str(s.forecast),
                currency=s.currency,
                spend_currency=s.spend_currency,
                comparable=s.comparable,
                problem=s.problem,
            )
            for s in budget_status(db, instant, team=caller.team_scope)
        ]

    @router.put("/budgets/{team}/{month}", status_code=204)
    def put_budget(
        db: db,
        caller: admin,
        team: str,
        month: Annotated[str, Path(description=MONTH_HELP)],
        body: BudgetIn,
        project: Annotated[str, Query(description="Only this project of the team; default: the whole team.")] = "",
        allow_unknown_team: Annotated[
            bool, Query(description="Set it even if the team has no jobs, rules, ledger hours or budgets yet.")
        ] = False,
    ) -> Response:
        """Set a team's (or its project's) budget for month YYYY-MM, replacing any. 422 naming the field
        (``loc``) for an amount, currency (not the price catalog's), month, team or project refused, and for a
        team not known yet unless ``allow_unknown_team=true``."""
        with _budget_refused():
            set_budget(
                db, team, body.amount, parse_month(month), body.currency, project,
                catalog=fallback_catalog, allow_unknown_team=allow_unknown_team, actor=caller.actor,
            )  # fmt: skip
        return Response(status_code=204)

    @router.delete("/budgets/{team}/{month}", status_code=204, responses=NOT_FOUND)
    def remove_budget(
        db: db, caller: admin, team: str, month: Annotated[str, Path(description=MONTH_HELP)], project: str = ""
    ) -> Response:
        """Remove a budget; 404 if there is none, 422 for a month, team or project no budget can have."""
        with _budget_refused():
            first = parse_month(month)
            if not delete_budget(db, team, first, project, actor=caller.actor):
                raise HTTPException(404, f"no budget for team {team!r} project {project!r} in {first:%Y-%m}")
        return Response(status_code=204)

    @router.get("/idle-episodes")
    def idle_episodes(db: db, caller: reader, start: str, end: str) -> list[dict[str, Any]]:
        """Idle episodes overlapping [start, end), costliest first; an episode on a GPU whose model has no price
        has cost null, ``unpriced_model`` and ``unpriced_fix``, and comes after the priced ones. A team token: its
        team's jobs' episodes only."""
        period = instant(start, "start"), instant(end, "end")
        return [e.as_dict() for e in list_episodes(db, *period, team=caller.team_scope)]

    @router.get("/rightsizing", response_model=None, responses=CSV_TOO)
    def rightsizing_findings(
        db: db,
        caller: reader,
        start: Annotated[str, Query(description="Period start, ISO 8601 (UTC if no offset).")],
        end: Annotated[str, Query(description="Period end (exclusive), ISO 8601.")],
        by: Annotated[Literal["job", "user", "team"], Query(description="job, user or team.")] = "job",
        team: Annotated[str | None, Query(max_length=MAX_NAME, description="Only jobs billed to this team.")] = None,
        user: Annotated[str | None, Query(max_length=128, description="Only jobs of this user.")] = None,
        idle_ratio: Annotated[float, Query(ge=0, le=1)] = _RIGHTSIZING.idle_ratio,
        low_utilization_ratio: Annotated[float, Query(ge=0, le=1)] = _RIGHTSIZING.low_utilization_ratio,
        memory_headroom: Annotated[AsciiDecimal, Query(ge=1, le=MAX_MEMORY_HEADROOM, allow_inf_nan=False)] = (
            _RIGHTSIZING.memory_headroom
        ),
        format: Annotated[Literal["json", "csv"], Query(description="json or csv.")] = "json",
    ) -> Any:
        """Right-sizing over [start, end), as ``gpu-finops rightsizing``: per job (GPUs requested and kept busy, the
        request that suffices, the MIG profile or cheaper model its memory peak fits, the savings, the fix lines and
        notes), or summed per user or team. Thresholds left out take
        :class:`~finops.savings.rightsizing_policy.RightsizingPolicy`'s defaults. A team token: its team's jobs
        only (403 for another ``team``)."""
        period = instant(start, "start"), instant(end, "end")
        if caller.team_scope is not None and team not in (None, caller.team_scope):
            raise forbidden(caller, f"a viewer token to read team {team!r}")
        policy = RightsizingPolicy(idle_ratio, low_utilization_ratio, memory_headroom)
        report = rightsizing(
            db, *period, catalog=catalog_in_force(db, fallback_catalog), priced_at=utc_now(), policy=policy,
            team=caller.team_scope or team, user=user,
        )  # fmt: skip
        if format == "csv":
            return Response(rightsizing_csv(report, by), media_type="text/csv")
        return {
            "by": by,
            "start": start,
            "end": end,
            "priced_at": report.priced_at.isoformat(),
            "jobs_examined": report.jobs_examined,
            "jobs_unmetered": report.jobs_unmetered,
            "rows": rightsizing_dicts(report, by),
        }

    @router.get("/events")
    def events(
        db: db,
        caller: reader,
        since: str | None = None,
        kind: Annotated[str | None, Query(description=f"One of {', '.join(EVENT_KINDS)}.")] = None,
        unconsumed: bool = False,
    ) -> list[dict[str, Any]]:
        """Budget and anomaly events in id order; a team token: its team's only."""
        if kind is not None:
            one_of(kind, "kind", EVENT_KINDS)
        found = list_events(
            db,
            since=None if since is None else instant(since, "since"),
            kind=kind,
            unconsumed=unconsumed,
            team=caller.team_scope,
        )
        return [
            {
                "id": e.id,
                "kind": e.kind,
                "team": e.team,
                "occurred_at": e.occurred_at.isoformat(),
                "payload": e.payload,
                "consumed": e.consumed_at is not None,
            }
            for e in found
        ]

    @router.get("/team-rules")
    def team_rules(db: db, caller: reader) -> list[TeamRuleIn]:
        """Team rules in resolution order (the kinds in the site's precedence, then key and value); a team token:
        those naming its team."""
        return [
            TeamRuleIn(kind=r.kind, key=r.key, value=r.value, team=r.team)
            for r in list_rules(db)
            if caller.sees_team(r.team)
        ]

    @router.put("/team-rules", status_code=200)
    def put_team_rule(db: db, caller: admin, rule: TeamRuleIn) -> dict[str, int]:
        """Create or replace a rule; returns how many jobs moved team."""
        with unprocessable():
            return {"jobs_moved": set_rule(db, rule.kind, rule.key, rule.value, rule.team, actor=caller.actor)}

    @router.get("/team-rules/precedence")
    def team_rule_precedence(db: db, caller: reader) -> TeamRulePrecedenceIn:
        """The order team rules are tried in: ``namespace`` (default) or ``label``."""
        return TeamRulePrecedenceIn(precedence=precedence(db))

    @router.put("/team-rules/precedence", status_code=200)
    def put_team_rule_precedence(db: db, caller: admin, chosen: TeamRulePrecedenceIn) -> dict[str, int]:
        """Set the team rule precedence; returns how many jobs moved team."""
        return {"jobs_moved": set_precedence(db, chosen.precedence, actor=caller.actor)}

    @router.delete("/team-rules/{kind}")
    def remove_team_rule(
        db: db, caller: admin, kind: str, value: Annotated[RuleValue, Query()], key: Annotated[RuleKey, Query()] = ""
    ) -> dict[str, int]:
        """Remove a rule; returns how many jobs moved team."""
        one_of(kind, "kind", TEAM_RULE_KINDS)
        with unprocessable():
            return {"jobs_moved": delete_rule(db, kind, key, value, actor=caller.actor)}

    @router.get("/audit")
    def audit(
        db: db,
        caller: admin,
        since: Annotated[str | None, Query(description="Entries at or after, ISO 8601.")] = None,
        until: Annotated[str | None, Query(description="Entries before, ISO 8601.")] = None,
        actor: Annotated[str | None, Query(max_length=ACTOR_MAX_LENGTH)] = None,
        action: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    ) -> list[dict[str, Any]]:
        """The audit log (admin only), newest first: who changed what, when, before → after
        (:mod:`finops.access.audit`)."""
        entries = list_entries(
            db,
            since=None if since is None else instant(since, "since"),
            until=None if until is None else instant(until, "until"),
            actor=actor,
            action=action,
            limit=limit,
        )
        return [e.as_dict() for e in entries]

    return router
