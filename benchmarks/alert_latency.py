"""Alert latency: from the moment a condition is true in the data to the message received by a local webhook.

Usage::

    .venv/bin/python benchmarks/alert_latency.py [--database-url URL] [--trials 10] \\
        [--rollup-seconds 3] [--group-wait-seconds 2] [--poll-seconds 0.5]

Prints figures; asserts nothing about time.

**Model.** A condition becomes true in the data at a moment uniformly placed within a rollup interval R. The next
scheduled rollup (after U(0, R)) rebuilds the ledger and records events; the alert rules run right after it and
create the alert and its group; the group waits ``group_wait`` W (instants are stored in whole seconds, so
between W − 1 s and W); the first delivery pass after that (every P seconds: U(0, P)) decides the group, queues
the message and sends it. Latency = U(0, R) + processing + W + U(0, P) + send. The model is printed for the
default settings (``FINOPS_ROLLUP_INTERVAL_SECONDS`` 300, ``group_wait`` 30 s, ``FINOPS_ALERT_DELIVERY_POLL_SECONDS``
5) and for the shortened intervals measured here. An alert joining a group that was already notified waits for
the group's next ``group_interval`` tick instead of ``group_wait`` (up to 5 minutes more by default).

**Measurement.** The real scheduler (:func:`finops.service.scheduler.start_scheduler` with an
:class:`alerts.service.AlertRunner`) on a fresh database with shortened intervals; a local HTTP server as the
Slack webhook. One team per trial, each with a job on its own GPU (2 hours of readings, in the ledger) and a
budget far above its spend; a trial starts at a random moment, commits a budget of spent ÷ 0.85 (the condition
"80 % of the budget spent" is then true in the data) and waits for the webhook to receive that team's message.
Processing times of the rollup, the evaluation and the delivery passes are measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from sqlalchemy import text  # noqa: E402

import finops.service.scheduler as scheduler_module  # noqa: E402
from alerts.config import AlertConfig, parse_config  # noqa: E402
from alerts.delivery import Channels  # noqa: E402
from alerts.service import AlertRunner, AlertService  # noqa: E402
from alerts.webhooks import WebhookPolicy  # noqa: E402
from finops.analysis.budgets import budget_status, set_budget  # noqa: E402
from finops.analysis.idle import IdlePolicy  # noqa: E402
from finops.db.engine import make_engine, session_factory, upgrade  # noqa: E402
from finops.ledger.rollup import rollup  # noqa: E402
from finops.pricing.catalog import (  # noqa: E402
    Pricing,
    PricingModel,
    load_catalog,
)
from finops.service.cost_metrics import CostMetrics  # noqa: E402
from finops.settings.combined import Settings  # noqa: E402
from finops.timeutil import to_epoch, utc_now  # noqa: E402
from tests.support.alert_cluster import Cluster, minute_floor  # noqa: E402
from tests.support.alert_servers import Webhook  # noqa: E402


def model(rollup: float, wait: float, poll: float, samples: int = 200_000) -> dict[str, float]:
    """Latency quantiles (seconds) of U(0, rollup) + group wait + U(0, poll), without processing; the group wait
    is uniform in [wait − 1, wait] (whole-second instants). Monte Carlo with a fixed seed."""
    rng = random.Random(1)
    values = sorted(
        rng.uniform(0, rollup) + rng.uniform(max(wait - 1, 0), wait) + rng.uniform(0, poll) for _ in range(samples)
    )
    return {
        "min": max(wait - 1, 0),
        "p50": values[len(values) // 2],
        "mean": statistics.fmean(values),
        "p95": values[int(len(values) * 0.95)],
        "max": rollup + wait + poll,
    }


def _timed(function: Callable[..., Any], store: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            store.append(time.perf_counter() - began)

    return wrapper


def _fresh(url: str) -> None:
    engine = make_engine(url)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
    upgrade(engine)
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="Database to use (its schema is dropped); default: a temporary SQLite")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--rollup-seconds", type=float, default=3.0)
    parser.add_argument("--group-wait-seconds", type=float, default=2.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    args = parser.parse_args()

    defaults, alert_defaults = Settings(), AlertConfig()
    rollup_s = float(defaults.rollup_interval_seconds)
    wait_s = alert_defaults.timers.group_wait.total_seconds()
    poll_s = defaults.alert_delivery_poll_seconds
    print(
        f"Default settings: rollup every {rollup_s:.0f} s, group_wait {wait_s:.0f} s, delivery pass every {poll_s:g} s"
    )
    figures = model(rollup_s, wait_s, poll_s)
    print("  model, before processing: " + ", ".join(f"{k} {v:.1f} s" for k, v in figures.items()))

    url = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'alert-latency.sqlite'}"
    _fresh(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    teams = [f"team-{k:02d}" for k in range(args.trials)]
    for k, team in enumerate(teams):
        node = f"bench-{k:02d}"
        cluster.readings(node, [0], now - timedelta(hours=2), now + timedelta(seconds=1), job=str(9000 + k))
        cluster.job(str(9000 + k), f"acct-{k:02d}", "bench", node, 1, now - timedelta(hours=2), team=team)
    with sessions.begin() as session:
        rollup(session, pricing, to_epoch(utc_now()))
        for team in teams:
            set_budget(session, team, Decimal(1_000_000), now, "USD", actor="system:benchmark")

    webhook = Webhook()
    config = parse_config(
        {
            "timers": {"group_wait": args.group_wait_seconds},
            "routes": [{"match": ['rule=~"budget-.*"'], "slack": ["bench"]}],
            "rules": {"budget-forecast": {"enabled": False}},
        },
        "benchmark",
    )
    policy = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)
    service = AlertService(
        config, channels=Channels({"bench": SecretStr(webhook.url)}, policy), poll_seconds=args.poll_seconds
    )
    rollups: list[float] = []
    evaluations: list[float] = []
    passes: list[float] = []
    runner = AlertRunner(service, sessions)
    runner.evaluate = _timed(runner.evaluate, evaluations)  # type: ignore[method-assign]
    runner.deliver = _timed(runner.deliver, passes)  # type: ignore[method-assign]
    scheduler_module.run_rollup = _timed(scheduler_module.run_rollup, rollups)  # type: ignore[assignment]
    running = scheduler_module.start_scheduler(
        sessions, pricing, IdlePolicy(), CostMetrics(CollectorRegistry()), args.rollup_seconds, alerts=runner,  # type: ignore[arg-type]
    )  # fmt: skip
    rng = random.Random(7)
    latencies = []
    try:
        time.sleep(args.rollup_seconds * 2)  # the first rollups and evaluations (silent-node alerts and the like)
        for team in teams:
            time.sleep(rng.uniform(0, args.rollup_seconds))
            with sessions.begin() as session:
                (status,) = budget_status(session, utc_now(), team=team)
                set_budget(
                    session,
                    team,
                    (status.spent / Decimal("0.85")).quantize(Decimal("0.01")),
                    now,
                    "USD",
                    actor="system:benchmark",
                )
            true_at = time.time()
            title = f"[FIRING] Budget 80 % reached: team {team}"
            deadline = time.monotonic() + 10 * (args.rollup_seconds + args.group_wait_seconds + args.poll_seconds)
            while time.monotonic() < deadline:
                found = [at for body, at in zip(webhook.received, webhook.received_at, strict=True)
                         if body["blocks"][0]["text"]["text"] == title]  # fmt: skip
                if found:
                    latencies.append(found[0] - true_at)
                    break
                time.sleep(0.01)
            else:
                print(f"  {team}: no message within the deadline")
    finally:
        running.shutdown(wait=True)
        runner.close()
        webhook.close()
        engine.dispose()

    print(
        f"\nMeasured on {engine.dialect.name}: rollup every {args.rollup_seconds:g} s, group_wait "
        f"{args.group_wait_seconds:g} s, delivery pass every {args.poll_seconds:g} s, {len(latencies)} trials"
    )
    short = model(args.rollup_seconds, args.group_wait_seconds, args.poll_seconds)
    print("  model, before processing: " + ", ".join(f"{k} {v:.2f} s" for k, v in short.items()))
    if latencies:
        print(
            f"  measured: min {min(latencies):.2f} s, median {statistics.median(latencies):.2f} s, "
            f"mean {statistics.fmean(latencies):.2f} s, max {max(latencies):.2f} s"
        )
        print("  each: " + ", ".join(f"{x:.2f}" for x in latencies))
    processing = [
        ("rollup", rollups),
        ("alert evaluation", evaluations),
        ("delivery pass (dispatch + send)", passes),
    ]
    for name, values in processing:
        if values:
            print(f"  {name}: median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms "
                  f"over {len(values)} runs")  # fmt: skip
    extra = statistics.median(rollups or [0]) + statistics.median(evaluations or [0]) + max(passes or [0])
    print(
        f"\nWith the default settings: about {figures['mean'] + extra:.0f} s on average (median "
        f"{figures['p50'] + extra:.0f} s, 95 % within {figures['p95'] + extra:.0f} s, at most "
        f"{figures['max'] + extra:.0f} s): the model's figures plus this run's processing time."
    )


if __name__ == "__main__":
    main()
