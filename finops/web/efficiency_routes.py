"""``GET /api/v1/efficiency``: SM activity bands per team and the busy-but-inefficient jobs with their probable
bottleneck (:mod:`finops.savings.efficiency`, docs/efficiency.md), as ``gpu-finops report --by efficiency``.

A ``viewer`` or ``admin`` token reads every team, or one with ``team``; a ``team`` token reads its own team only
(403 for another ``team``), as ``/api/v1/rightsizing`` does."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy.orm import Session, sessionmaker

from finops.access.api_tokens import Principal
from finops.analysis.budgets import MAX_NAME
from finops.savings.efficiency import efficiency_report
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.efficiency_report import efficiency_csv, efficiency_dict
from finops.web.auth import ApiAuth, forbidden
from finops.web.conformance import CSV_TOO
from finops.web.deps import instant, transaction


def efficiency_router(sessions: sessionmaker[Session], auth: ApiAuth, policy: EfficiencyPolicy) -> APIRouter:
    """The efficiency route on ``sessions``, authenticated by ``auth``, judging with ``policy`` (the
    ``FINOPS_EFFICIENCY_*`` settings); included under ``/api/v1`` by :func:`finops.web.rest.create_router`."""
    router = APIRouter()
    reader = Annotated[Principal, Depends(auth.reader)]
    db = Annotated[Session, Depends(transaction(sessions), scope="function")]

    @router.get("/efficiency", response_model=None, responses=CSV_TOO)
    def efficiency(
        db: db,
        caller: reader,
        start: Annotated[str, Query(description="Period start, ISO 8601 (UTC if no offset).")],
        end: Annotated[str, Query(description="Period end (exclusive), ISO 8601.")],
        team: Annotated[str | None, Query(max_length=MAX_NAME, description="Only jobs billed to this team.")] = None,
        format: Annotated[Literal["json", "csv"], Query(description="json or csv.")] = "json",
    ) -> Any:
        """Efficiency over [start, end): ``teams``, per team its SM activity band (effective ≥ 0.8, moderate ≥ 0.5,
        ineffective below, ``not measured``), SM/tensor/DRAM activity, profiled share, allocated, SM-active and
        inactive cost and its jobs' cost per band; ``inefficient``, the jobs at mean utilisation ≥ 0.8 with SM
        activity < 0.5, costliest first, each with its ``bottleneck``, ``evidence`` and ``fix``; ``thresholds``.
        CSV: the inefficient jobs. A team token: its team only (403 for another ``team``)."""
        period = instant(start, "start"), instant(end, "end")
        if caller.team_scope is not None and team not in (None, caller.team_scope):
            raise forbidden(caller, f"a viewer token to read team {team!r}")
        report = efficiency_report(db, *period, policy=policy, team=caller.team_scope or team)
        if format == "csv":
            return Response(efficiency_csv(report), media_type="text/csv")
        return efficiency_dict(report)

    return router
