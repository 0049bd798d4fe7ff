"""The idle-gpu alert never counts an unpriced idle episode (no price for its GPU's model) as 0: a job whose idle
GPUs are all unpriced has no cost (null) and says so with the model and the fix; a job with priced and unpriced
idle GPUs has the priced cost and names the unpriced ones. ``list_episodes`` puts the unpriced episodes after the
priced ones, longest first (both databases)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import AlertConfig
from alerts.engine import RuleInputs, evaluate
from alerts.models import AlertInstance
from alerts.render import Shown, render_group
from alerts.rules.candidate import money
from alerts.slack import slack_payload
from finops.analysis.idle import IdlePolicy, detect_idle, list_episodes
from finops.ledger.rollup import rollup
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch, utc_now
from tests.support.alert_cluster import Cluster, idle, minute_floor
from tests.support.unpriced import UNPRICED_MODEL

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
INPUTS = RuleInputs(idle_window_seconds=1800, idle_max_gap_seconds=150, collector_interval_seconds=10)


def test_unpriced_idle_gpus_are_said_unpriced_not_zero(sessions: sessionmaker[Session]) -> None:
    now = minute_floor(utc_now())
    start, until = now - timedelta(hours=2), now + timedelta(seconds=1)
    cluster = Cluster(sessions)
    # Job 7001 (vision): GPUs 0-1 priced H100s, GPU 2 unpriced idle for 2 h, GPU 3 unpriced idle for the last hour.
    cluster.readings("gpu-a-01", [0, 1], start, until, values=idle, job="7001")
    cluster.readings("gpu-a-01", [2], start, until, values=idle, job="7001", model=UNPRICED_MODEL)
    cluster.readings("gpu-a-01", [3], now - timedelta(hours=1), until, values=idle, job="7001", model=UNPRICED_MODEL)
    cluster.job("7001", "cv-lab", "alice", "gpu-a-01", 4, start, team="vision")
    # Job 7101 (nlp): two unpriced GPUs only.
    cluster.readings("gpu-b-01", [0, 1], start, until, values=idle, job="7101", model=UNPRICED_MODEL)
    cluster.job("7101", "nlp-lab", "bob", "gpu-b-01", 2, start, team="nlp")
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
        assert detect_idle(session, now - timedelta(hours=6), until, IdlePolicy(), PRICING) == 6
        episodes = list_episodes(session, now - timedelta(hours=6), until)
    assert [e.cost is None for e in episodes] == [False, False, True, True, True, True], "unpriced after priced"
    unpriced_hours = [e.hours for e in episodes if e.cost is None]
    assert unpriced_hours == sorted(unpriced_hours, reverse=True) and unpriced_hours[-1] < unpriced_hours[0]
    priced = sum((e.cost or Decimal(0) for e in episodes if e.job_id == "7001"), Decimal(0))
    assert priced > 0

    with sessions.begin() as session:
        evaluate(session, AlertConfig(), INPUTS, now + timedelta(seconds=20))
    with sessions() as session:
        alerts = {
            a.labels["job"]: a for a in session.scalars(select(AlertInstance).where(AlertInstance.rule == "idle-gpu"))
        }
    fix = unpriced_fix(UNPRICED_MODEL)

    mixed = alerts["7001"]
    assert Decimal(mixed.figures["cost"]) == priced and mixed.figures["unpriced_models"] == [UNPRICED_MODEL]
    summary = mixed.annotations["summary"]
    assert f"costing {money(priced, 'USD')} so far, not counting 2 unpriced GPUs" in summary
    assert f"No price for {UNPRICED_MODEL!r}: {fix}." in summary
    fields = dict(mixed.annotations["fields"])
    assert fields["Cost so far"] == f"{money(priced, 'USD')} + 2 unpriced GPUs" and UNPRICED_MODEL in fields["Unpriced"]

    unknown = alerts["7101"]
    assert unknown.figures["cost"] is None and unknown.figures["unpriced_models"] == [UNPRICED_MODEL]
    summary = unknown.annotations["summary"]
    assert "their cost unknown (unpriced)" in summary and "0.00" not in summary and fix in summary
    assert dict(unknown.annotations["fields"])["Cost so far"] == "unpriced"

    message = render_group([Shown("idle-gpu", "warning", unknown.annotations)], [], {"team": "nlp"}, "http://dash")
    assert "their cost unknown (unpriced)" in message.summary and fix in message.summary
    assert ("Cost so far", "unpriced") in message.fields
    slack = orjson.dumps(slack_payload(message)).decode()
    assert "unpriced" in slack and UNPRICED_MODEL in slack
