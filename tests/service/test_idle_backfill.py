"""Readings that arrive a month late (a collector's spool after an outage) POSTed through the ingest API: the
rollup (``gpu-finops rollup``) judges their idle episodes as one detection over the whole period would, episodes
crossing the edge of what arrived in one go included, and no alert fires about last month."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from alerts.models import AlertInstance
from alerts.rules.idle import idle_candidates
from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import gpu_info_dict, reading_dict
from finops.analysis.idle import IdlePolicy, detect_idle, list_episodes
from finops.cli import app
from finops.db.models import IdleEpisode
from finops.jobs.slurm import SacctJob, format_sacct_line
from finops.jobs.slurm_import import import_sacct
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.alert_cluster import MODEL, gpu_uuid, minute_floor
from tests.support.servers import running

TOKEN = "backfill-token"
NODE = "gpu-b-01"
IDLE, BUSY = 0.0, 0.9
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
Pattern = Callable[[int, int], float | None]  # (GPU index, minute) → utilisation, None: no reading


def backfill_pattern(index: int, minute: int) -> float | None:
    """Eight hours of three GPUs. GPU 0 (job 9101): busy an hour, idle 2.5 h, busy, idle 40 min, a 10-minute
    outage, idle 50 min, busy, then idle after its job ended. GPU 1 (job 9101): idle throughout. GPU 2 (job 9102
    from the second hour): idle 25 min, busy, then idle to the end."""
    if index == 0:
        if 280 <= minute < 290:
            return None
        return BUSY if minute < 60 or 210 <= minute < 240 or 340 <= minute < 360 else IDLE
    if index == 1:
        return IDLE
    return BUSY if 85 <= minute < 120 else IDLE


def _readings(start: datetime, minutes: range, pattern: Pattern, job: Callable[[int, int], str | None]) -> list[Sample]:
    samples = []
    for minute in minutes:
        for index in range(3):
            utilization = pattern(index, minute)
            if utilization is None:
                continue
            values = {
                m.GPU_UTILIZATION: utilization,
                m.GPU_POWER: 600.0 if utilization else 70.0,
                m.GPU_MEMORY_USED: 2.0**30 if index == 0 else 0.0,
                m.GPU_MEMORY_TOTAL: 80.0 * 2**30,
                m.GPU_ENERGY: 36_000.0 * minute,
            }
            labels = {"gpu": str(index), "uuid": gpu_uuid(NODE, index), "model": MODEL}
            samples.append(Sample("gpu", labels, values, start + timedelta(minutes=minute), job(index, minute)))
    return samples


def _post(url: str, samples: list[Sample], per_batch: int = 180) -> None:
    """POST ``samples`` to the ingest API in gzip JSON batches of ``per_batch`` readings, as a draining spool does."""
    gpus = list({s.labels["uuid"]: gpu_info_dict(s) for s in samples}.values())
    for first in range(0, len(samples), per_batch):
        body = {"node": NODE, "gpus": gpus, "samples": [reading_dict(s) for s in samples[first : first + per_batch]]}
        response = httpx.post(
            f"{url}/api/v1/ingest",
            content=gzip.compress(orjson.dumps(body)),
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        assert response.status_code == 200, response.text


def _sacct(job_id: str, gpus: int, start: datetime, end: datetime | None) -> str:
    record = SacctJob(
        job_id=job_id, job_id_raw=job_id, cluster="orion", partition="gpu", account="cv-lab", user="alice",
        submit=start, start=start, end=end, elapsed=(end or utc_now()) - start,
        state="RUNNING" if end is None else "COMPLETED", cancelled_by=None, gpus=gpus, gpu_type=None,
        nodes=(NODE,), name=f"job-{job_id}",
    )  # fmt: skip
    return format_sacct_line(record, tz=UTC)


def _episodes(sessions: sessionmaker[Session]) -> list[tuple[object, ...]]:
    with sessions() as session:
        rows = session.scalars(select(IdleEpisode).order_by(IdleEpisode.gpu_id, IdleEpisode.start)).all()
        return [(e.gpu_id, e.job_pk, e.start, e.end, e.memory_held, e.cost, e.currency) for e in rows]


@pytest.fixture
def cli(engine, monkeypatch) -> CliRunner:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", TOKEN)
    return CliRunner()


def _invoke(cli: CliRunner, *args: str) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_month_old_backfill_gets_the_episodes_of_a_whole_period_detection(sessions, cli) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    live_start = now - timedelta(minutes=90)
    back = now.replace(minute=10) - timedelta(days=30)  # 10 minutes past an hour, a month ago
    with running(create_app(sessions, TOKEN)) as url:
        # The collector is back: the last 90 minutes, all three GPUs busy under job 9200, rolled up.
        _post(url, _readings(live_start, range(90), lambda i, minute: BUSY, lambda i, minute: "9200"))
        with sessions.begin() as session:
            assert import_sacct(session, [_sacct("9200", 3, live_start, None)], source="test").jobs == 1
        _invoke(cli, "rollup")

        # Its spool drains: the month-old readings, in two goes with a rollup between them, the cut (minute 200)
        # falling inside idle runs of all three GPUs.
        def job(index: int, minute: int) -> str | None:
            if index < 2:
                return "9101" if minute < 360 else None
            return "9102" if minute >= 60 else None

        _post(url, _readings(back, range(200), backfill_pattern, job))
        with sessions.begin() as session:
            lines = [_sacct("9101", 2, back, back + timedelta(hours=6)), _sacct("9102", 1, back + timedelta(hours=1),
                     back + timedelta(hours=8))]  # fmt: skip
            assert import_sacct(session, lines, source="test").jobs == 2
        _invoke(cli, "rollup")
        _post(url, _readings(back, range(200, 480), backfill_pattern, job))
        assert "idle episodes" in _invoke(cli, "rollup")

    stored = _episodes(sessions)
    with sessions.begin() as session:
        listed = list_episodes(session, back - timedelta(days=1), now + timedelta(minutes=1))
        detect_idle(session, back - timedelta(days=1), now + timedelta(minutes=1), IdlePolicy(), PRICING)
    assert _episodes(sessions) == stored, "the rollups stored what one detection over the whole period stores"
    by_gpu = sorted((e.gpu_index, e.job_id, e.start - back, e.end - back) for e in listed)
    minute = timedelta(minutes=1)
    assert by_gpu == [
        (0, "9101", 60 * minute, 210 * minute),
        (0, "9101", 240 * minute, 279 * minute + timedelta(seconds=150)),  # the outage ends the run after max gap
        (0, "9101", 290 * minute, 340 * minute),
        (1, "9101", 10 * minute, 360 * minute),  # from the grace's end to the job's end, across the cut
        (2, "9102", 120 * minute, 480 * minute),  # to the job's end: the next reading is a month later
    ]
    assert all(e.memory_held == (e.gpu_index == 0) for e in listed)

    # The same episodes open at their end would alert; a month later nothing does.
    with sessions() as session:
        assert idle_candidates(session, back + timedelta(minutes=479), 1800, 150)
    _invoke(cli, "alerts", "evaluate")
    with sessions() as session:
        alerts = session.scalars(select(AlertInstance)).all()
    assert [(a.rule, a.labels) for a in alerts if a.rule == "idle-gpu" or a.labels.get("job") in ("9101", "9102")] == []
