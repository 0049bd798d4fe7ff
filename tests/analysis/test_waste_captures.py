"""The waste reasons end to end on readings built from real captures (:mod:`tests.support.waste_node`): nvidia-smi
rows of H100, RTX 4080 SUPER and L40S machines read through the collector's nvml source, InfiniBand, NFS and Lustre
counters of real hosts read through its node sources, stored by ingest, the ledger rolled up and the idle episodes
judged; then the idle cost by reason, which must add up to the cost report's idle cost.

DERIVED, beside what :mod:`tests.support.waste_node` says: the traffic between two readings of the fabric and storage
captures (the counters grown by a chosen rate), and one GPU whose idle row is given a power-cap clocks-event reason:
no capture holds a thermal or power reason active (every one shows ``gpu_idle`` or none).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
import pytest
from click.testing import Result
from sqlalchemy import select
from typer.testing import CliRunner

from alerts.render import Shown, render_group
from alerts.rules.idle import idle_candidates
from finops.access.api_tokens import create_token
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.report import cost_report
from finops.analysis.waste import (
    INTERACTIVE,
    NO_READING,
    OVER_REQUESTED,
    STALLED_PROCESS,
    THROTTLED,
    UNEXPLAINED,
    WAITING_ON_NETWORK,
    WAITING_ON_STORAGE,
)
from finops.cli import app
from finops.db.models import UNALLOCATED_TEAM, Gpu, IdleEpisode, Job, Node
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.waste_costs import idle_cost_by_reason, low_utilization_jobs
from finops.savings.waste_tables import reason_dicts
from finops.timeutil import to_epoch, utc_now
from finops.web.app import create_app
from tests.support.captured_node import CapturedNode
from tests.support.servers import API_TOKEN, running
from tests.support.waste_node import H100, L40S, RTX_4080, capture_row, edited, run_node, sacct_line, steady, switching

T0 = datetime(2026, 3, 2, 10, tzinfo=UTC)
MINUTES = 60
LUSTRE_BYTES_PER_SECOND = 2_100_000_000
IB_BYTES_PER_SECOND = 1_200_000_000


@dataclass(frozen=True)
class Built:
    episodes: dict[str, tuple[str, str]]
    """job id → (reason, evidence) of its one idle episode."""
    pricing: Pricing


@pytest.fixture
def built(sessions, shared_data: Path, tmp_path: Path) -> Built:  # type: ignore[no-untyped-def]
    idle, load = capture_row(shared_data, H100, "idle"), capture_row(shared_data, H100, "load")
    # quiet node: no traffic on its (real) fabric and storage counters
    run_node(
        sessions, "gpu-q-01",
        [
            steady(load, "701"),  # 701 uses GPU 0 and leaves GPU 1 at 0 %
            steady(idle, "701"),
            steady(idle, "702"),
            switching(load, idle, 20, "703"),  # the real idle row: gpu_idle reason at 345 MHz after 1,980 at load
            switching(load, edited(idle, **{"clocks_event_reasons.active": "0x0000000000000004"}), 20, "704"),
            steady(capture_row(shared_data, RTX_4080, "idle"), "705"),  # 596 MiB held at 0 %
            steady(idle, "706"),
            steady(capture_row(shared_data, L40S, "load"), "707"),  # 9 % all along: low, never idle
        ],
        T0, MINUTES, captured=CapturedNode(shared_data, tmp_path / "quiet"), grow=lambda node, seconds: None,
    )  # fmt: skip

    def lustre_reads(node: CapturedNode, seconds: int) -> None:
        node.grow_lustre(read_bytes=LUSTRE_BYTES_PER_SECOND * seconds)

    run_node(sessions, "gpu-s-01", [steady(idle, "708")], T0, MINUTES,
             captured=CapturedNode(shared_data, tmp_path / "storage"), grow=lustre_reads)  # fmt: skip

    def fabric(node: CapturedNode, seconds: int) -> None:
        node.grow_infiniband("mlx5_0", "1", "received", IB_BYTES_PER_SECOND * seconds // 4)

    run_node(sessions, "gpu-n-01", [steady(idle, "709")], T0, MINUTES,
             captured=CapturedNode(shared_data, tmp_path / "fabric"), grow=fabric)  # fmt: skip
    lines = [
        sacct_line("701", "acct-over", "gpu-q-01", 2, T0, MINUTES),
        sacct_line("702", "acct-quiet", "gpu-q-01", 1, T0, MINUTES),
        sacct_line("703", "acct-quiet", "gpu-q-01", 1, T0, MINUTES),
        sacct_line("704", "acct-hot", "gpu-q-01", 1, T0, MINUTES),
        sacct_line("705", "acct-stalled", "gpu-q-01", 1, T0, MINUTES),
        sacct_line("706", "acct-notebook", "gpu-q-01", 1, T0, MINUTES, name="sys/dashboard/sys/jupyter"),
        sacct_line("707", "acct-low", "gpu-q-01", 1, T0, MINUTES),
        sacct_line("708", "acct-storage", "gpu-s-01", 1, T0, MINUTES),
        sacct_line("709", "acct-fabric", "gpu-n-01", 1, T0, MINUTES),
        sacct_line("710", "acct-dark", "gpu-u-01", 2, T0, MINUTES),  # a node without a collector
    ]
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        for account in {line.split("|")[4] for line in lines}:
            map_account(session, account, account.removeprefix("acct-"), actor="system:test")
        result = import_sacct(session, lines, source="test")
        assert (result.jobs, result.errors) == (len(lines), [])
        rollup(session, pricing, to_epoch(T0 + timedelta(hours=2)))
        detect_idle(session, T0, T0 + timedelta(hours=2), IdlePolicy(), pricing)
    with sessions() as session:
        rows = session.execute(
            select(Job.job_id, IdleEpisode.reason, IdleEpisode.evidence).join(Job, Job.id == IdleEpisode.job_pk)
        ).all()
    episodes = {job_id: (reason, evidence) for job_id, reason, evidence in rows}
    assert len(episodes) == len(rows), "one episode per job"
    return Built(episodes, pricing)


def test_each_episode_gets_its_reason_from_the_captured_readings(built: Built) -> None:
    reasons = {job: reason for job, (reason, _) in built.episodes.items()}
    assert reasons == {
        "701": OVER_REQUESTED,
        "702": UNEXPLAINED,
        "703": UNEXPLAINED,
        "704": THROTTLED,
        "705": STALLED_PROCESS,
        "706": INTERACTIVE,
        "708": WAITING_ON_STORAGE,
        "709": WAITING_ON_NETWORK,
    }, "707 at 9 % is never idle; 710 has no reading"
    evidence = {job: text for job, (_, text) in built.episodes.items()}
    assert evidence["708"].startswith("2.1 GB/s Lustre reads during the episode"), "from the llite read_bytes sums"
    assert evidence["709"].startswith("1.2 GB/s InfiniBand traffic received during the episode"), "words x 4"
    assert evidence["701"] == "this GPU at 0 % over the whole job so far while another GPU of the job averaged 100 %"
    assert evidence["704"] == (
        "power clocks-event reasons on 100 % of the readings, SM clock 345 MHz against 1,980 MHz before"
    )
    assert evidence["703"] == (
        "nothing stood out: storage 0.0 B/s, InfiniBand 0.0 B/s, no throttling, no memory held"
    ), "the captured idle GPU: gpu_idle reason and 345 MHz, neither thermal nor power"
    assert evidence["705"] == "0.6 GiB of GPU memory held with no compute"
    assert evidence["706"] == "interactive by convention: job name sys/dashboard/sys/jupyter matches *sys/dashboard/*"


def test_idle_cost_by_reason_adds_up_to_the_cost_reports_idle_cost(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        rows = idle_cost_by_reason(session, T0, T0 + timedelta(hours=2))
        report = {r.key: r for r in cost_report(session, T0, T0 + timedelta(hours=2))}
    by_team: dict[str, dict[str, Decimal]] = {}
    for row in rows:
        assert row.month == datetime(2026, 3, 1, tzinfo=UTC) and row.currency == "USD"
        by_team.setdefault(row.team, {})[row.reason] = row.cost
    for team, reasons in by_team.items():
        idle = sum((cost for reason, cost in reasons.items() if reason != NO_READING), Decimal(0))
        assert idle == report[team].idle_cost, team
        assert reasons.get(NO_READING, Decimal(0)) == (
            report[team].allocated_cost if report[team].unmetered_gpu_seconds else Decimal(0)
        ), team
    assert UNALLOCATED_TEAM not in by_team
    assert {team: set(reasons) for team, reasons in by_team.items()} == {
        "over": {OVER_REQUESTED},
        "quiet": {UNEXPLAINED},
        "hot": {THROTTLED},  # the episode's hour is the job's only one: its 20 busy minutes go with it
        "stalled": {STALLED_PROCESS},
        "notebook": {INTERACTIVE},
        "low": {UNEXPLAINED},
        "storage": {WAITING_ON_STORAGE},
        "fabric": {WAITING_ON_NETWORK},
        "dark": {NO_READING},
    }
    dicts = {(d["team"], d["reason"]): d for d in reason_dicts(rows)}
    for kind in ("idle", "unmetered"):  # each kind's cents add up to its own rounded total
        cents = sum(Decimal(str(d["cost"] or 0)) for d in dicts.values() if d["kind"] == kind)
        exact = sum((r.cost for r in rows if (r.reason == NO_READING) == (kind == "unmetered")), Decimal(0))
        assert cents == exact.quantize(Decimal("0.01")), kind
    assert {key: d["kind"] for key, d in dicts.items() if d["kind"] == "unmetered"} == {
        ("dark", NO_READING): "unmetered"
    }
    assert dicts["storage", WAITING_ON_STORAGE]["title"] == "waiting on storage"
    stalled = dicts["stalled", STALLED_PROCESS]
    assert (stalled["cost"], stalled["unpriced_gpu_hours"]) == (None, stalled["gpu_hours"]), "the RTX 4080 has no price"


def test_low_utilization_jobs_carry_their_verdicts(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        jobs = {job.job_id: job for job in low_utilization_jobs(session, T0, T0 + timedelta(hours=2))}
        one_team = low_utilization_jobs(session, T0, T0 + timedelta(hours=2), team="low")
    assert jobs["707"].verdict.reason == UNEXPLAINED
    assert jobs["707"].verdict.evidence == "mean utilisation 9 %, no idle episode long enough to read a reason from"
    assert jobs["707"].mean_utilization == pytest.approx(0.09)
    assert jobs["708"].verdict.reason == WAITING_ON_STORAGE
    assert "waiting on storage (2.1 GB/s Lustre reads" in jobs["708"].verdict.evidence
    assert jobs["710"].verdict.reason == NO_READING and jobs["710"].mean_utilization is None
    assert jobs["710"].idle_gpu_seconds == 2 * MINUTES * 60, "its unmetered GPU time"
    assert jobs["701"].verdict.reason == OVER_REQUESTED
    assert [job.job_id for job in one_team] == ["707"]


def test_episodes_are_judged_again_with_later_evidence(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    """A rollup that judges the hours again finds the episode once, its reason as before (nothing changed)."""
    with sessions.begin() as session:
        detect_idle(session, T0, T0 + timedelta(hours=2), IdlePolicy(), built.pricing)
        again = session.execute(select(IdleEpisode.gpu_id, IdleEpisode.reason)).all()
        nodes = {gpu: host for gpu, host in session.execute(select(Gpu.id, Node.hostname).join(Node))}
    assert len(again) == len(built.episodes)
    assert {nodes[gpu]: reason for gpu, reason in again if nodes[gpu] != "gpu-q-01"} == {
        "gpu-s-01": WAITING_ON_STORAGE, "gpu-n-01": WAITING_ON_NETWORK
    }  # fmt: skip


def test_report_by_reason_on_the_command_line(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    url = sessions.kw["bind"].url.render_as_string(hide_password=False)

    def report(*args: str) -> Result:
        return CliRunner().invoke(
            app, ["report", "--by", "reason", "--start", "2026-03-02", "--end", "2026-03-02", *args],
            env={"FINOPS_DATABASE_URL": url},
        )  # fmt: skip

    table = report()
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].startswith("Idle cost by reason, in USD")
    storage = next(line for line in lines if line.startswith("storage "))
    assert storage.split()[:4] == ["storage", "2026-03", "waiting", "on"]
    assert any(line.startswith("TOTAL") for line in lines)
    assert any("waiting on storage: mean utilisation 0 %; its idle episodes" in line for line in lines), "the jobs"
    # No reading is kept apart from the idle waste: its own table after the idle one, not in the idle TOTAL.
    idle_part, _, unmetered_part = table.stdout.partition("No reading (not idle waste")
    assert not any(line.startswith("dark ") for line in idle_part.splitlines())
    idle_total = next(line for line in idle_part.splitlines() if line.startswith("TOTAL")).split()
    assert idle_total[-1] == "45.27" and "13.76" not in idle_total, "the 8 idle teams, not the 2 dark GPU-hours"
    dark = next(line for line in unmetered_part.splitlines() if line.startswith("dark "))
    assert dark.split() == ["dark", "2026-03", "2.00", "0.00", "13.76"]
    assert any(line.startswith("710 ") for line in unmetered_part.splitlines()), "the job without readings"
    assert not any(line.startswith("710 ") for line in idle_part.splitlines())
    assert "run the collector on the nodes these jobs ran on" in unmetered_part
    kinds = {(r["team"], r["kind"]) for r in orjson.loads(report("--format", "json").stdout)["rows"]}
    assert ("dark", "unmetered") in kinds and ("storage", "idle") in kinds and ("dark", "idle") not in kinds
    body = orjson.loads(report("--format", "json", "--team", "fabric").stdout)
    assert [(r["team"], r["reason"]) for r in body["rows"]] == [("fabric", WAITING_ON_NETWORK)]
    assert body["jobs"][0]["job_id"] == "709" and body["ledger_hours_pending"] == 0
    rows = list(csv.DictReader(io.StringIO(report("--format", "csv").stdout)))
    assert {row["team"] for row in rows} >= {"storage", "fabric", "dark"}
    refused = report("--cluster", "orion")
    assert refused.exit_code == 2 and "--by reason takes --team" in refused.output


def test_idle_by_reason_over_rest_with_team_scoping(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _, storage_token = create_token(session, "team", utc_now(), team="storage", actor="system:test")
    with running(create_app(sessions, None, api_token=API_TOKEN)) as url:

        def get(query: str, token: str = API_TOKEN) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.get(f"{url}/api/v1/costs/idle-by-reason{query}", headers=headers, timeout=30)

        everything = get("?month=2026-03").json()
        assert everything["month"] == "2026-03"
        assert {r["team"] for r in everything["rows"]} >= {"storage", "fabric", "over", "dark"}
        with sessions() as session:
            march = idle_cost_by_reason(session, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
        assert everything["rows"] == reason_dicts(march)
        scoped = get("?month=2026-03", storage_token).json()
        assert [(r["team"], r["reason"]) for r in scoped["rows"]] == [("storage", WAITING_ON_STORAGE)]
        assert [j["job_id"] for j in scoped["jobs"]] == ["708"]
        csv_text = get("?month=2026-03&format=csv", storage_token)
        assert csv_text.headers["content-type"].startswith("text/csv")
        assert next(csv.DictReader(io.StringIO(csv_text.text)))["reason"] == WAITING_ON_STORAGE
        assert get("?month=2026-02").json()["rows"] == []
        bad = get("?month=2026-13")
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "month"]
        assert get("?month=2026-03", "wrong").status_code == 401


def test_the_idle_gpu_alert_says_the_probable_reason(sessions, built: Built) -> None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        candidates = {c.labels["job"]: c for c in idle_candidates(session, T0 + timedelta(minutes=MINUTES), 1800, 150)}
    storage = candidates["708"]
    fields = dict(storage.annotations["fields"])
    assert fields["Probable reason"].startswith("waiting on storage: 2.1 GB/s Lustre reads during the episode")
    assert storage.annotations["summary"].endswith(
        "Probably waiting on storage: 2.1 GB/s Lustre reads during the episode (node-wide, peak 2.1 GB/s)."
    )
    assert (storage.figures["reason"], storage.figures["evidence"][:8]) == (WAITING_ON_STORAGE, "2.1 GB/s")
    assert dict(candidates["705"].annotations["fields"])["Probable reason"].startswith("stalled process: 0.6 GiB")
    message = render_group([Shown("idle-gpu", "warning", storage.annotations)], [], {"job": "708"}, "")
    assert "Probable reason: waiting on storage: 2.1 GB/s Lustre reads" in message.plain_text()
