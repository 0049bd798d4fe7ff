"""Two clusters for the dashboard, report and alert-listing tests: the scenario's node in cluster ``orion``
(partition ``gpu``) and a second node ``gpu-b-01`` in cluster ``vega`` (partition ``debug``), plus the alerts and
silences of both."""

from __future__ import annotations

from datetime import datetime, timedelta

from alerts.store import create_silence, expire_silence
from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops.db.engine import make_engine, session_factory
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch, utc_now
from tests.support import scenario
from tests.support.alert_rows import alert_row

NODE_B = "gpu-b-01"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
THROTTLED = CLOCKS_EVENT_REASONS["sw_power_cap"] | CLOCKS_EVENT_REASONS["hw_thermal"]


def second_node_batch(t0: datetime) -> IngestBatch:
    """Node ``gpu-b-01``: one H100 read every minute over [T, T+2h) at 25 %, 300 W, 70 °C, clocks held down by the
    software power cap and hardware thermal slowdown."""
    readings = [
        Sample(
            "gpu",
            {"gpu": "0", "uuid": UUID_B, "model": scenario.MODEL},
            {
                m.GPU_UTILIZATION: 0.25,
                m.GPU_POWER: 300.0,
                m.GPU_ENERGY: 18_000.0 * minute,
                m.GPU_TEMPERATURE: 70.0,
                m.GPU_CLOCKS_EVENT_REASONS: float(THROTTLED),
                m.GPU_MEMORY_USED: 2.0**30,
                m.GPU_MEMORY_TOTAL: 80.0 * 2**30,
            },
            t0 + timedelta(minutes=minute),
        )
        for minute in range(120)
    ]
    return IngestBatch.model_validate(
        {"node": NODE_B, "gpus": [gpu_info_dict(readings[0])], "samples": [reading_dict(s) for s in readings]}
    )


def seed_two_clusters(url: str) -> datetime:
    """The scenario (:func:`tests.support.scenario.seed_dashboard_database`) plus node ``gpu-b-01`` whose GPU job 601 of
    cluster ``vega``, partition ``debug``, account ``acct-c`` (team ``gamma``) holds over [T+1h, T+2h); returns T."""
    t0 = scenario.seed_dashboard_database(url)
    start, end = (t0 + timedelta(hours=h) for h in (1, 2))
    job = (
        f"601|601|vega|debug|acct-c|carol|{start:%Y-%m-%dT%H:%M:%S}|{start:%Y-%m-%dT%H:%M:%S}|"
        f"{end:%Y-%m-%dT%H:%M:%S}|01:00:00|COMPLETED|billing=8,cpu=8,gres/gpu=1,mem=64G,node=1|{NODE_B}|eval"
    )
    with session_factory(make_engine(url)).begin() as session:
        map_account(session, "acct-c", "gamma", actor="system:test")
        Ingestor().store(session, second_node_batch(t0))
        import_sacct(session, [job], source="second node")
        rollup(session, Pricing(load_catalog(), PricingModel.ON_DEMAND), to_epoch(t0 + timedelta(hours=2)))
    seed_alerts(url, t0)
    return t0


def seed_alerts(url: str, t0: datetime) -> None:
    """Alerts of the two clusters as the alert engine stores them: ``throttling`` of node B's GPU 0 (team gamma, job
    601) firing since T+1h; ``collector-silent`` of the scenario's node (no team) firing since T+2h and muted by
    a silence ``node="<scenario.NODE>"`` (comment "rack move") in force from an hour ago to a day from now;
    ``idle-gpu`` of job 501 (team alpha) resolved, over [T+1h, T+90min); and a silence ``team="gamma"`` that
    ended an hour ago."""
    now = utc_now()
    hour, ninety, two_hours = (t0 + timedelta(minutes=minutes) for minutes in (60, 90, 120))
    with session_factory(make_engine(url)).begin() as session:
        session.add_all(
            [
                alert_row("throttling", "warning", {"team": "gamma", "node": NODE_B, "gpu": "0", "job": "601"},
                       hour, None, f"GPU throttled: {NODE_B} GPU 0"),
                alert_row("collector-silent", "critical", {"node": scenario.NODE}, two_hours, None,
                       f"Collector silent: {scenario.NODE}"),
                alert_row("idle-gpu", "warning", {"team": "alpha", "job": "501", "user": "alice"}, hour, ninety,
                       "Idle GPUs: job 501"),
            ]
        )  # fmt: skip
        create_silence(session, [f'node="{scenario.NODE}"'], now + timedelta(days=1), now,
                       starts_at=now - timedelta(hours=1), created_by="ops", comment="rack move",
                       actor="system:test")  # fmt: skip
        expired = create_silence(session, ['team="gamma"'], now + timedelta(hours=1), now,
                                 starts_at=now - timedelta(hours=2), comment="eval runs",
                                 actor="system:test")  # fmt: skip
        expire_silence(session, expired, now - timedelta(hours=1), actor="system:test")
