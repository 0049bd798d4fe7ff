"""Alert rules on real data, both databases: budget and anomaly events, idle jobs, throttling, silent collectors,
lost GPUs, data quality; inhibition of a silent node's alerts; a failing rule leaves its alerts alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import AlertConfig, parse_config
from alerts.engine import RuleInputs, evaluate, fingerprint
from alerts.models import AlertInstance
from alerts.rules.candidate import money
from alerts.store import list_alerts
from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from finops.analysis.budgets import budget_status, record_budget_events, set_budget
from finops.analysis.events import SPEND_ANOMALY, list_events, record_event
from finops.analysis.idle import IdlePolicy, detect_idle, list_episodes
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import month_start, next_month_start, to_epoch, utc_now
from tests.support.alert_cluster import Cluster, busy, idle, minute_floor
from tests.support.scenario import seed_dashboard_database, slice_end, start_hour

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
INPUTS = RuleInputs(idle_window_seconds=1800, idle_max_gap_seconds=150, collector_interval_seconds=10)


def _evaluate(sessions: sessionmaker[Session], now: datetime, config: AlertConfig | None = None) -> None:
    with sessions.begin() as session:
        evaluate(session, config or AlertConfig(), INPUTS, now)


def _firing(sessions: sessionmaker[Session], now: datetime, rule: str | None = None) -> list:  # type: ignore[type-arg]
    with sessions() as session:
        return [a for a in list_alerts(session, now) if rule is None or a.rule == rule]


def _instance(sessions: sessionmaker[Session], rule: str) -> AlertInstance:
    with sessions() as session:
        return session.scalars(select(AlertInstance).where(AlertInstance.rule == rule)).one()


def test_budget_thresholds_become_alerts_once_and_the_highest_supersedes(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    seed_dashboard_database(engine.url.render_as_string(hide_password=False))
    now = slice_end(start_hour())  # in the slice's month, also in a month's first hours
    with sessions.begin() as session:
        (status,) = budget_status(session, now)
        set_budget(
            session,
            "alpha",
            (status.spent / Decimal("0.85")).quantize(Decimal("0.01")),
            now,
            "USD",
            actor="system:test",
        )
        record_budget_events(session, now)
    _evaluate(sessions, now)
    with sessions() as session:
        assert list_events(session, unconsumed=True) == [], "events are taken by the evaluation that made alerts"
        (status,) = budget_status(session, now)
    alerts = {a.rule: a for a in _firing(sessions, now)}
    assert {"budget-50", "budget-80"} <= set(alerts) and "budget-100" not in alerts
    assert alerts["budget-50"].muted and not alerts["budget-80"].muted, "80 % supersedes 50 % of the same month"
    eighty = _instance(sessions, "budget-80")
    assert eighty.labels == {"team": "alpha", "month": f"{now:%Y-%m}", "rule": "budget-80", "severity": "warning"}
    assert eighty.ends_at == next_month_start(now), "a budget alert lasts until its month ends"
    assert eighty.figures["spent"] == str(status.spent) and eighty.figures["budget"] == str(status.budget)
    assert money(status.spent, "USD") in eighty.annotations["summary"]
    assert f"({status.used_percent} %)" in eighty.annotations["summary"]

    _evaluate(sessions, now + timedelta(minutes=5))
    with sessions() as session:
        count = len(session.scalars(select(AlertInstance).where(AlertInstance.rule.like("budget-%"))).all())
    assert count == len([r for r in alerts if r.startswith("budget-")]), "the same events make no second alert"
    _evaluate(sessions, next_month_start(now) + timedelta(minutes=1))
    assert not [a for a in _firing(sessions, next_month_start(now)) if a.rule.startswith("budget-")]


def test_spend_anomaly_event_is_an_alert_until_the_day_after(sessions) -> None:  # type: ignore[no-untyped-def]
    now = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    payload = {"team": "vision", "day": "2026-11-19", "spend": "812.500000", "baseline_median": "120.000000",
               "z_score": "9.31", "currency": "USD"}  # fmt: skip
    with sessions.begin() as session:
        record_event(session, SPEND_ANOMALY, "anomaly:vision:2026-11-19", None, now, payload)
    _evaluate(sessions, now)
    (alert,) = _firing(sessions, now)
    assert alert.rule == "spend-anomaly" and alert.labels["team"] == "vision" and alert.labels["day"] == "2026-11-19"
    assert "812.50 USD on 2026-11-19" in alert.summary and "120.00 USD" in alert.summary
    assert _instance(sessions, "spend-anomaly").ends_at == datetime(2026, 11, 21, tzinfo=UTC)


def _idle_job(cluster: Cluster, now: datetime, node: str = "gpu-a-01", job: str = "7001", other: str = "7002") -> None:
    """Job ``job`` of team vision (user alice) holding 4 GPUs of ``node`` idle for the 2 hours up to ``now``, and
    job ``other`` of the same team busy on 2 more GPUs."""
    start = now - timedelta(hours=2)
    cluster.readings(node, [0, 1, 2, 3], start, now + timedelta(seconds=1), values=idle, job=job)
    cluster.readings(node, [4, 5], start, now + timedelta(seconds=1), values=busy, job=other)
    cluster.job(job, "cv-lab", "alice", node, 4, start, team="vision")
    cluster.job(other, "cv-lab", "bob", node, 2, start, team="vision")


def test_an_idle_job_is_one_alert_with_its_gpus_cost_and_owner(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    _idle_job(Cluster(sessions), now)
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
        assert detect_idle(session, now - timedelta(hours=6), now + timedelta(seconds=1), IdlePolicy(), PRICING) == 4
        episodes = list_episodes(session, now - timedelta(hours=6), now + timedelta(seconds=1))
    _evaluate(sessions, now + timedelta(seconds=20))
    (alert,) = _firing(sessions, now, "idle-gpu")
    assert alert.labels == {"team": "vision", "job": "7001", "user": "alice", "rule": "idle-gpu", "severity": "warning"}
    instance = _instance(sessions, "idle-gpu")
    cost = sum((e.cost for e in episodes), Decimal(0))
    assert instance.figures["gpus"] == [["gpu-a-01", i] for i in range(4)]
    assert Decimal(instance.figures["cost"]) == cost > 0
    assert f"costing {money(cost, 'USD')} so far" in alert.summary and "4 GPUs of job 7001" in alert.summary
    grace_start = now - timedelta(hours=2) + timedelta(seconds=IdlePolicy().grace_seconds)
    assert instance.starts_at == grace_start + timedelta(seconds=1800), "true once idle for the window"
    # The episodes stop growing (no newer readings): past the max gap they are over and the alert resolves.
    _evaluate(sessions, now + timedelta(minutes=5))
    assert _firing(sessions, now, "idle-gpu") == []
    assert _instance(sessions, "idle-gpu").state == "resolved"


def _reasons(*names: str) -> float:
    return float(sum(CLOCKS_EVENT_REASONS[name] for name in names))


def test_throttling_needs_five_minutes_on_an_allocated_gpu(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    start, step = now - timedelta(minutes=8), timedelta(seconds=10)
    cluster = Cluster(sessions)

    def throttled(names: tuple[str, ...], since: timedelta) -> object:
        def values(index: int, at: datetime) -> dict[str, float]:
            return {**busy(index, at), m.GPU_CLOCKS_EVENT_REASONS: _reasons(*names) if at >= now - since else 0.0}

        return values

    end = now + timedelta(seconds=1)
    cluster.readings("gpu-t-01", [0], start, end, step=step, values=throttled(("hw_thermal",), timedelta(minutes=6)),
                     job="8001")  # fmt: skip
    cluster.readings("gpu-t-01", [1], start, end, step=step, values=throttled(("sw_power_cap",), timedelta(minutes=3)),
                     job="8001")  # fmt: skip
    cluster.readings("gpu-t-01", [3], start, end, step=step,
                     values=throttled(("gpu_idle", "sync_boost"), timedelta(minutes=8)), job="8001")  # fmt: skip
    cluster.readings("gpu-t-01", [2], start, end, step=step, values=throttled(("hw_thermal",), timedelta(minutes=8)))
    cluster.job("8001", "nlp-lab", "carol", "gpu-t-01", 3, start - timedelta(minutes=1), team="nlp")
    _evaluate(sessions, now)
    (alert,) = _firing(sessions, now, "throttling")
    assert alert.labels == {"team": "nlp", "node": "gpu-t-01", "gpu": "0", "job": "8001", "rule": "throttling",
                            "severity": "warning"}  # fmt: skip
    instance = _instance(sessions, "throttling")
    assert instance.figures["reasons"] == ["thermal"]
    assert instance.starts_at == now - timedelta(minutes=6) + timedelta(minutes=5)
    assert "thermal throttled for 6 min" in alert.summary
    # The power-capped GPU reaches 5 minutes two minutes later.
    cluster.readings("gpu-t-01", [1], now + step, now + timedelta(minutes=2, seconds=1), step=step,
                     values=throttled(("sw_power_cap",), timedelta(minutes=3)), job="8001")  # fmt: skip
    _evaluate(sessions, now + timedelta(minutes=2))
    gpus = sorted(a.labels["gpu"] for a in _firing(sessions, now, "throttling"))
    assert gpus == ["1"], "GPU 0's newest reading is now 2 minutes old: stale, not judged"


def test_silent_collectors_and_lost_gpus(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    step = timedelta(seconds=10)
    cluster.readings("gpu-s-01", [0, 1], now - timedelta(minutes=10), now - timedelta(minutes=5), step=step)
    cluster.readings("gpu-s-02", [0], now - timedelta(minutes=10), now + timedelta(seconds=1), step=step)
    cluster.readings("gpu-s-02", [1], now - timedelta(minutes=10), now - timedelta(minutes=2), step=step)
    cluster.job("9001", "ops", "dave", "gpu-s-03", 1, now - timedelta(hours=1))  # placement only, never reported
    _evaluate(sessions, now)
    silent = _firing(sessions, now, "collector-silent")
    assert [a.labels for a in silent] == [{"node": "gpu-s-01", "rule": "collector-silent", "severity": "critical"}]
    assert "for 5 min" in silent[0].summary
    lost = _firing(sessions, now, "gpu-lost")
    assert [a.labels for a in lost] == [{"node": "gpu-s-02", "gpu": "1", "rule": "gpu-lost", "severity": "critical"}]
    assert _instance(sessions, "collector-silent").starts_at == now - timedelta(minutes=5) - step + timedelta(
        seconds=30
    )
    # gpu-s-01 reports again: its alert resolves. With 12 intervals (2 min), GPU 1 of gpu-s-02 is still lost.
    cluster.readings("gpu-s-01", [0, 1], now, now + timedelta(seconds=21), step=step)
    config = parse_config({"rules": {"gpu-lost": {"intervals": 12}}}, "test")
    _evaluate(sessions, now + timedelta(seconds=20), config)
    assert _firing(sessions, now, "collector-silent") == []
    assert [a.labels["gpu"] for a in _firing(sessions, now, "gpu-lost")] == ["1"], "2 min 30 s ≥ 12 × 10 s"


def test_a_silent_node_inhibits_its_idle_and_throttling_alerts(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    _idle_job(cluster, now - timedelta(seconds=60), node="gpu-q-01")
    _idle_job(cluster, now, node="gpu-q-02", job="7101", other="7102")
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
        detect_idle(session, now - timedelta(hours=6), now + timedelta(seconds=1), IdlePolicy(), PRICING)
    _evaluate(sessions, now)
    alerts = {(a.rule, a.labels.get("node", a.labels.get("job"))): a.muted for a in _firing(sessions, now)}
    assert alerts == {
        ("collector-silent", "gpu-q-01"): False,
        ("idle-gpu", "7001"): True,  # on the silent node: held back
        ("idle-gpu", "7101"): False,
    }


def test_data_quality_does_not_fire_for_idle_capacity(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    """3 of 4 GPUs held by no job, read idle: capacity between jobs, which is normal, is no data problem."""
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    start = now - timedelta(hours=3)
    cluster.readings("gpu-d-01", [0], start, now, job="9101")
    cluster.readings("gpu-d-01", [1, 2, 3], start, now, values=idle)
    cluster.job("9101", "cv-lab", "erin", "gpu-d-01", 1, start, team="vision")
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
    _evaluate(sessions, now, parse_config({"rules": {"collector-silent": {"enabled": False}}}, "test"))
    assert _firing(sessions, now, "data-quality") == []


def test_data_quality_fires_for_unknown_jobs_with_the_fix(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    start = now - timedelta(hours=3)
    cluster.readings("gpu-d-01", [0], start, now, job="9101")
    cluster.readings("gpu-d-01", [1, 2], start, now)  # busy with no job id and no imported job: unknown jobs
    cluster.readings("gpu-d-01", [3], start, now, values=idle)  # no job on the GPU
    cluster.job("9101", "cv-lab", "erin", "gpu-d-01", 1, start, team="vision")
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
    _evaluate(sessions, now, parse_config({"rules": {"collector-silent": {"enabled": False}}}, "test"))
    (alert,) = _firing(sessions, now, "data-quality")
    assert alert.labels == {"rule": "data-quality", "severity": "warning"}
    instance = _instance(sessions, "data-quality")
    shares = [instance.figures[f"{name}_share"] for name in ("unknown_job", "no_reading", "no_job")]
    assert shares == pytest.approx([0.5, 0.0, 0.25], abs=0.01), "2 of 4 GPUs busy with no known job, 1 idle"
    assert instance.annotations["title"] == "Data quality: 50% of GPU time ran unknown jobs"
    summary = instance.annotations["summary"]
    assert "50.0% of the 12.0 GPU-hours since " in summary and "ran jobs the service does not know" in summary
    assert "that the job ids the collectors read are those of the imported jobs." in summary
    assert summary.endswith("Idle capacity (no job on the GPU, normal, not a problem): 25.0%.")
    relaxed = parse_config({"rules": {"data-quality": {"max_unknown_job_share": 0.6}}}, "test")
    _evaluate(sessions, now + timedelta(minutes=1), relaxed)
    assert _firing(sessions, now, "data-quality") == []


def test_data_quality_fires_for_gpu_time_without_readings_and_names_the_nodes(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    """A job on gpu-d-02, a node without a collector: its 2 GPUs' 6 GPU-hours have no reading, a third of the 18
    GPU-hours in service; gpu-d-01's GPUs read idle with no job (normal)."""
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    start = now - timedelta(hours=3)
    cluster.readings("gpu-d-01", [0, 1, 2, 3], start, now, values=idle)
    cluster.job("9201", "cv-lab", "erin", "gpu-d-02", 2, start, team="vision")
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
    quiet = {"collector-silent": {"enabled": False}}
    _evaluate(sessions, now, parse_config({"rules": quiet}, "test"))
    assert len(_firing(sessions, now, "data-quality")) == 1
    instance = _instance(sessions, "data-quality")
    assert instance.figures["no_reading_share"] == pytest.approx(1 / 3, abs=0.01)
    assert instance.figures["unknown_job_share"] == 0 and instance.figures["nodes_without_readings"] == {
        "gpu-d-02": 6 * 3600
    }
    assert instance.annotations["title"] == "Data quality: 33% of GPU time without readings"
    summary = instance.annotations["summary"]
    assert "6.0 GPU-hours of it held by jobs whose use and idle cost are therefore unknown: gpu-d-02 (6.0 GPU-h)" in (
        summary
    )
    assert "Check that the collector runs on these nodes" in summary and "unknown jobs" not in summary
    off = parse_config({"rules": {**quiet, "data-quality": {"max_no_reading_share": 1}}}, "test")
    _evaluate(sessions, now + timedelta(minutes=1), off)
    assert _firing(sessions, now, "data-quality") == []


def test_a_failing_rule_leaves_its_alerts_and_the_others_run(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    Cluster(sessions).readings("gpu-f-01", [0], now - timedelta(minutes=10), now - timedelta(minutes=5))
    _evaluate(sessions, now)
    assert len(_firing(sessions, now, "collector-silent")) == 1

    def broken(*args: object) -> object:
        raise RuntimeError("rule bug")

    monkeypatch.setattr("alerts.engine.silence_candidates", broken)
    with sessions.begin() as session:
        done = evaluate(session, AlertConfig(), INPUTS, now + timedelta(minutes=1))
    assert done.failed_rules == ("collector-silent", "gpu-lost")
    assert len(_firing(sessions, now, "collector-silent")) == 1, "not resolved by a rule that could not run"
    disabled = parse_config({"rules": {"collector-silent": {"enabled": False}}}, "test")
    monkeypatch.undo()
    _evaluate(sessions, now + timedelta(minutes=2), disabled)
    assert _firing(sessions, now, "collector-silent") == [], "a disabled rule's alerts end"


def test_fingerprint_is_rule_and_sorted_labels_without_severity() -> None:
    a = fingerprint("idle-gpu", {"team": "vision", "job": "1", "severity": "warning"})
    assert a == fingerprint("idle-gpu", {"job": "1", "team": "vision", "severity": "critical", "rule": "x"})
    assert a != fingerprint("idle-gpu", {"team": "vision", "job": "2"})
    assert a != fingerprint("throttling", {"team": "vision", "job": "1"})
    assert len(a) == 16 and int(a, 16) >= 0


def test_month_helpers_used_by_budget_alerts() -> None:
    at = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    assert month_start(at) == datetime(2026, 12, 1, tzinfo=UTC)
    assert next_month_start(at) == datetime(2027, 1, 1, tzinfo=UTC)
