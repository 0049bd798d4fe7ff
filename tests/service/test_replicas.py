"""Several replicas on one PostgreSQL, as real processes on 127.0.0.1: two ``serve --no-scheduler`` take a cluster's
readings round-robin, two ``scheduler`` processes run the scheduled jobs under job leases. The rollup's lease holder
is killed with SIGKILL mid-rollup: held at its first chunk's team-hours by a lock the test takes on that table (the
ledger rows of the chunk written, nothing committed). The other scheduler takes the leases over, redoes the rollup,
evaluates, dispatches and delivers the alerts: the ledger equals that of one process (one ``serve``, then
``gpu-finops rollup``) on the same data in another database, row for row, and every alert reaches a local webhook
exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, make_url, text

from collector.contract.sample import Sample
from collector.shipper import Shipper
from finops.db.engine import make_engine
from finops.timeutil import floor_hour, from_epoch, to_epoch, utc_now
from tests.support.alert_cluster import busy, gpu_samples, idle, sacct_line
from tests.support.alert_servers import Webhook
from tests.support.servers import scheduler_process, serve_process

pytestmark = pytest.mark.slow

TOKEN = "replicas-ingest-token"
NODES = [f"gpu-rep-{n:02d}" for n in range(4)]
GPUS = range(4)
STEP = timedelta(minutes=5)
BATCH = timedelta(hours=2)
LEASE_SECONDS = 3
WAIT_SECONDS = 90.0

LEDGER_ROWS = """
    SELECT l.hour, g.uuid, j.job_id, t.name, l.seconds, l.used_gpu_seconds, l.sample_count, l.energy_joules,
           l.allocated_cost, l.used_cost, l.idle_cost, l.energy_cost, l.currency, l.pricing_model
    FROM ledger l JOIN gpus g ON g.id = l.gpu_id JOIN teams t ON t.id = l.team_id LEFT JOIN jobs j ON j.id = l.job_pk
    WHERE l.hour < :cutoff
    ORDER BY l.hour, g.uuid, j.job_id NULLS FIRST, t.name
"""
"""Every ledger column that carries meaning, the GPU, job and team by their names (ids differ between databases)."""


def _wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT_SECONDS) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)
    return found


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def _another_database(url: str, suffix: str) -> Iterator[str]:
    """A database beside ``url``'s on the same server, named after it with ``suffix``, dropped at the end."""
    server = make_url(url)
    name = f"{server.database}_{suffix}"
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _cluster(end: int) -> tuple[list[tuple[str, list[Sample]]], list[str]]:
    """Four nodes of four H100s reporting every 5 minutes for the 28 hours before ``end`` (epoch seconds, an hour),
    each node running one 4-GPU job for the first 20 hours (GPUs 0 and 1 busy, 2 and 3 idle) and then nothing.
    Returns the batches (node, readings of two hours) and the sacct lines of the jobs."""
    start = from_epoch(end) - timedelta(hours=28)
    batches, lines = [], []
    for number, node in enumerate(NODES):
        job, job_end = str(7000 + number), start + timedelta(hours=20)
        lines.append(sacct_line(job, f"acct-{number % 2}", "ada", node, len(GPUS), start, job_end))
        samples = []
        for gpus, values in (([0, 1], busy), ([2, 3], idle)):
            samples += gpu_samples(node, gpus, start, job_end, step=STEP, values=values, job=job)
            samples += gpu_samples(node, gpus, job_end, from_epoch(end), step=STEP, values=idle)
        at = start
        while at < from_epoch(end):
            batches.append((node, [s for s in samples if at <= s.timestamp < at + BATCH]))
            at += BATCH
    return batches, lines


def _load(env: dict[str, str], urls: list[str], batches: list[tuple[str, list[Sample]]], sacct: Path) -> None:
    """Post the batches through the services at ``urls`` in turn, import the jobs (no rollup) and map the
    accounts to teams (no rollup)."""
    for number, (node, samples) in enumerate(batches):
        shipper = Shipper(urls[number % len(urls)], TOKEN, node)
        try:
            assert shipper.ship(samples) == len(samples)
        finally:
            shipper.close()
    assert "imported 4 GPU jobs" in _cli(env, "import", "sacct", str(sacct), "--no-rollup")
    for account, team in (("acct-0", "vision"), ("acct-1", "speech")):
        _cli(env, "team", "map", account, team, "--no-rollup")


def _ledger(engine: Engine, cutoff: int) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(LEDGER_ROWS), {"cutoff": cutoff})]


def _rollup_holder_pid(engine: Engine) -> int | None:
    """The process id in the rollup lease's holder name (``host:pid:random``), None before anyone took it."""
    with engine.connect() as connection:
        holder = connection.scalar(text("SELECT holder FROM job_leases WHERE name = 'rollup'"))
    return None if holder is None else int(holder.split(":")[-2])


def _rollup_waiting_for_team_hours(engine: Engine) -> bool:
    """Whether a backend waits for a lock on ``ledger_team_hours`` of this database: the rollup, at its first
    chunk's team-hours, its ledger rows written."""
    query = """SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'ledger_team_hours'::regclass
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
    with engine.connect() as connection:
        return bool(connection.scalar(text(query)))


def _deliveries(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text("SELECT title, status FROM alert_deliveries"))]


def _rollups_logged(log: Path) -> int:
    return len(re.findall(r"finops\.service\.scheduler: rollup: ", log.read_text(errors="replace")))


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_services_two_schedulers_and_the_rollup_holder_killed_mid_rollup(database_url: str, tmp_path: Path) -> None:
    end = floor_hour(to_epoch(utc_now())) - 7200
    cutoff = floor_hour(to_epoch(utc_now()))  # every hour before it is whole in both ledgers
    batches, lines = _cluster(end)
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("\n".join(lines) + "\n")
    webhook = Webhook()
    rules = tmp_path / "alerts.yaml"
    rules.write_text("timers: {group_wait: 1s}\ndefault_route: {slack: [ops], group_by: [rule, node, team]}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FINOPS_")}
    settings = {
        "FINOPS_INGEST_TOKEN": TOKEN,
        "FINOPS_INGEST_READINGS_PER_SECOND": "1000000",
        "FINOPS_INGEST_READINGS_BURST": "1000000",
        "FINOPS_ROLLUP_INTERVAL_SECONDS": "2",
        "FINOPS_SACCT_SCHEDULE_SECONDS": "0",  # sacct may be on the PATH (a live Slurm's client)
        "FINOPS_JOB_LEASE_SECONDS": str(LEASE_SECONDS),
        "FINOPS_ALERT_RULES": str(rules),
        "FINOPS_ALERT_SLACK_WEBHOOKS": json.dumps({"ops": webhook.url}),
        "FINOPS_ALERT_WEBHOOK_HOSTS": '["127.0.0.1"]',
        "FINOPS_ALERT_WEBHOOK_ALLOW_PRIVATE": "true",
        "FINOPS_ALERT_DELIVERY_POLL_SECONDS": "0.5",
    }
    env = {**base, **settings, "FINOPS_DATABASE_URL": database_url}
    engine = make_engine(database_url)
    with ExitStack() as stack:
        stack.callback(webhook.close)
        stack.callback(engine.dispose)
        _cli(env, "db", "upgrade")
        urls = [stack.enter_context(serve_process(env)) for _ in range(2)]
        _load(env, urls, batches, sacct)

        blocker = stack.enter_context(engine.connect())
        blocker.execute(text("LOCK TABLE ledger_team_hours IN SHARE MODE"))  # readers pass, the rollup waits
        logs = [tmp_path / "scheduler-0.log", tmp_path / "scheduler-1.log"]
        schedulers = [stack.enter_context(scheduler_process(env, log)) for log in logs]
        _wait_for(lambda: _rollup_waiting_for_team_hours(engine), "a rollup mid-way")
        (killed,) = [n for n, p in enumerate(schedulers) if p.pid == _rollup_holder_pid(engine)]
        assert _ledger(engine, cutoff) == [], "nothing committed yet"
        other = logs[1 - killed]
        skipped = "rollup: skipped, another scheduler holds its lease"
        _wait_for(lambda: skipped in other.read_text(), "the other scheduler skipping the rollup")
        assert _rollups_logged(other) == 0, "one rollup at a time, on the lease holder"
        schedulers[killed].send_signal(signal.SIGKILL)
        schedulers[killed].wait(timeout=30)
        blocker.rollback()  # the killed rollup's backend finishes its statement, finds its client gone, rolls back

        survivor = schedulers[1 - killed]
        _wait_for(lambda: _rollup_holder_pid(engine) == survivor.pid, "the lease taken over")
        silent = [f"[FIRING] Collector silent: {node}" for node in NODES]

        def all_delivered() -> bool:
            rows = _deliveries(engine)
            titles = [title for title, _ in rows]
            done = {status for _, status in rows} == {"delivered"}
            return set(silent) <= set(titles) and done and len(webhook.delivered) == len(rows)

        _wait_for(all_delivered, "every alert delivered")
        rollups = _rollups_logged(logs[1 - killed])
        _wait_for(lambda: _rollups_logged(logs[1 - killed]) >= rollups + 2, "two more rollups and evaluations")
        replicated = _ledger(engine, cutoff)
        deliveries = _deliveries(engine)
        received = list(webhook.delivered)
        assert "lease taken over from" in logs[1 - killed].read_text()

    titles = [body["blocks"][0]["text"]["text"] for body in received]
    assert sorted(titles) == sorted(title for title, _ in deliveries), "every alert message reached the webhook"
    assert len(set(titles)) == len(titles), "each once"
    assert len(set(webhook.keys)) == len(webhook.keys)

    with _another_database(database_url, "single") as single_url:
        single_env = {**env, "FINOPS_DATABASE_URL": single_url}
        _cli(single_env, "db", "upgrade")
        with serve_process(single_env) as url:
            _load(single_env, [url], batches, sacct)
        _cli(single_env, "rollup")
        single = make_engine(single_url)
        try:
            expected = _ledger(single, cutoff)
        finally:
            single.dispose()
    assert len(expected) >= len(NODES) * len(GPUS) * 28
    assert replicated == expected
