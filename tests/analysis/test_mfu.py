"""finops/analysis/mfu.py: model FLOPs utilisation and cost per PFLOP of jobs whose ledger rows are in both databases
and whose vLLM / SGLang series are in a real Prometheus (Debian's package, backfilled by promtool), checked against
figures computed by hand; a job without the FLOPs counter gets no MFU and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import orjson
import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from finops.analysis.mfu import (
    NOT_REPORTED,
    JobEfficiency,
    achieved_flops_per_gpu,
    cost_per_pflop,
    job_efficiency,
    model_flops_utilization,
)
from finops.cli import app
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job, Node, Team
from finops.ingest.prometheus import PrometheusClient
from finops.pricing.catalog import load_catalog
from tests.support.prometheus_server import tsdb_holding

T0 = datetime(2026, 3, 2, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
STEP_SECONDS = 15
# Per-GPU FLOP/s of each series (vLLM: one per engine; SGLang: one per rank) and tokens/s.
VLLM_ENGINES = {"0": 2.0e14, "1": 3.0e14}
SGLANG_FLOPS = 1.0e14
VLLM_TOKENS = 100
SLURM_TOKENS = 50
SINCE_SECONDS = 10_000  # counters started this long before T0: increase() extrapolates to the window's edges


def _counter(name: str, labels: str, per_second: float) -> Iterator[str]:
    """A counter growing at ``per_second`` from T0 − 1 min to T0 + 1 h 1 min, a sample every 15 s."""
    for step in range(-4, 3600 // STEP_SECONDS + 5):
        at = T0 + timedelta(seconds=step * STEP_SECONDS)
        value = per_second * (SINCE_SECONDS + step * STEP_SECONDS)
        yield f"{name}{{{labels}}} {value:.0f} {int(at.timestamp() * 1000)}"


def _series() -> Iterator[str]:
    for engine, flops in VLLM_ENGINES.items():
        labels = f'model_name="llama",engine="{engine}",namespace="llm",pod="vllm-0"'
        yield from _counter("vllm:estimated_flops_per_gpu_total", labels, flops)
        yield from _counter("vllm:generation_tokens_total", labels, VLLM_TOKENS)
    sglang = 'model_name="qwen",engine_type="unified",tp_rank="0",pp_rank="0",namespace="llm",pod="sg-0"'
    yield from _counter("sglang:estimated_flops_per_gpu_total", sglang, SGLANG_FLOPS)
    yield from _counter("vllm:generation_tokens_total", 'model_name="old",engine="0",hpc_job="4242"', SLURM_TOKENS)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tsdb_holding("prometheus", tmp_path_factory.mktemp("prometheus"), _series()) as url:
        yield url


def _job(session: Session, team: Team, job_id: str, scheduler: str, gpus: list[Gpu], cost_per_gpu: str) -> None:
    job = Job(
        scheduler=scheduler, cluster="c1", job_id=job_id, job_id_raw=job_id, user="ana", account="ml",
        partition="gpu", name=job_id, state="COMPLETED", start=T0, end=T0 + HOUR, gpus=len(gpus), node_list="n1",
        team_id=team.id,
    )  # fmt: skip
    session.add(job)
    session.flush()
    for gpu in gpus:
        session.add(
            LedgerEntry(
                hour=T0, gpu_id=gpu.id, job_pk=job.id, team_id=team.id, seconds=3600, used_gpu_seconds=1800.0,
                sample_count=60, energy_joules=1.0e6, allocated_cost=Decimal(cost_per_gpu),
                used_cost=Decimal(cost_per_gpu) / 2, idle_cost=Decimal(cost_per_gpu) / 2, energy_cost=Decimal("0.03"),
                currency="USD", pricing_model="on-demand",
            )
        )  # fmt: skip


@pytest.fixture
def ledger(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """Three jobs' hour T0: vLLM on 2 H100s ($12.29 each), SGLang on an L40S ($1.86), a Slurm job on an A100 ($4.10)
    whose vLLM reports tokens but no FLOPs."""
    with sessions.begin() as session:
        team = Team(name="ml")
        node = Node(hostname="n1")
        session.add_all([team, node])
        session.flush()
        models = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "NVIDIA A100-SXM4-80GB"]
        gpus = [
            Gpu(uuid=f"GPU-{index}", node_id=node.id, gpu_index=index, model=model, in_service_from=T0)
            for index, model in enumerate(models)
        ]
        session.add_all(gpus)
        session.flush()
        _job(session, team, "llm/vllm-0", "kubernetes", gpus[:2], "12.29")
        _job(session, team, "llm/sg-0", "kubernetes", gpus[2:3], "1.86")
        _job(session, team, "4242", "slurm", gpus[3:], "4.10")
    return sessions


def _by_job(found: list[JobEfficiency]) -> dict[str, JobEfficiency]:
    return {row.job: row for row in found}


def test_mfu_and_cost_per_pflop_from_a_real_prometheus(ledger: sessionmaker[Session], prometheus_url: str) -> None:
    client = PrometheusClient(prometheus_url)
    with ledger() as session:
        found = _by_job(job_efficiency(session, client, load_catalog(), T0, T0 + HOUR))
    assert set(found) == {"llm/vllm-0", "llm/sg-0", "4242"}

    vllm = found["llm/vllm-0"]
    # By hand: the engines' mean, (2e14 + 3e14) / 2 = 2.5e14 FLOP/s per GPU, over the H100's dense BF16 989.5 TFLOPS.
    assert vllm.gpu_model == "H100-SXM-80GB" and vllm.precision == "bf16_tensor"
    assert vllm.peak_tflops == Decimal("989.5")
    assert vllm.achieved_flops_per_gpu == pytest.approx(2.5e14, rel=1e-9)
    assert vllm.mfu == pytest.approx(2.5e14 / 989.5e12, rel=1e-9)  # 0.25265…
    # 2.5e14 FLOP/s × 7,200 GPU-seconds = 1.8e18 FLOPs = 1,800 PFLOP for $24.58: $0.013655…/PFLOP.
    assert vllm.gpu_seconds == 7200 and vllm.cost == Decimal("24.58")
    assert vllm.flops == pytest.approx(1.8e18, rel=1e-9)
    assert vllm.cost_per_pflop == Decimal("0.013656")
    # 2 engines × 100 tokens/s × 3,600 s = 720,000 tokens: $24.58 / 0.72 = $34.138889 per 1M.
    assert vllm.tokens == 720_000 and vllm.cost_per_million_tokens == Decimal("34.138889")
    assert vllm.mfu_note is None

    sglang = found["llm/sg-0"]
    # SGLang's counter: 1e14 FLOP/s over the L40S's dense BF16 366.5 TFLOPS; 3.6e17 FLOPs = 360 PFLOP for $1.86.
    assert sglang.gpu_model == "L40S" and sglang.mfu == pytest.approx(1.0e14 / 366.5e12, rel=1e-9)
    assert sglang.cost_per_pflop == Decimal("0.005167")
    assert sglang.tokens == 0 and sglang.cost_per_million_tokens is None

    slurm = found["4242"]
    assert slurm.gpu_model == "A100-SXM4-80GB" and slurm.peak_tflops == 312
    assert (slurm.achieved_flops_per_gpu, slurm.flops, slurm.mfu, slurm.cost_per_pflop) == (None, None, None, None)
    assert slurm.mfu_note == NOT_REPORTED and "--enable-mfu-metrics" in NOT_REPORTED
    assert slurm.tokens == 180_000 and slurm.cost_per_million_tokens == Decimal("22.777778"), "tokens still priced"


def test_another_precision_and_a_peak_the_catalog_lacks(ledger: sessionmaker[Session], prometheus_url: str) -> None:
    client = PrometheusClient(prometheus_url)
    with ledger() as session:
        found = _by_job(
            job_efficiency(session, client, load_catalog(), T0, T0 + HOUR, jobs=["llm/vllm-0"], precision="fp8_tensor")
        )
    assert set(found) == {"llm/vllm-0"}
    assert found["llm/vllm-0"].peak_tflops == 1979
    assert found["llm/vllm-0"].mfu == pytest.approx(2.5e14 / 1979e12, rel=1e-9)
    with ledger() as session:
        a100 = _by_job(job_efficiency(session, client, load_catalog(), T0, T0 + HOUR, precision="fp8_tensor"))["4242"]
    assert a100.mfu is None and a100.mfu_note == NOT_REPORTED, "no counter: that is what to fix first"
    with ledger() as session:
        l40s = _by_job(job_efficiency(session, client, load_catalog(), T0, T0 + HOUR, precision="fp64"))["llm/sg-0"]
    assert l40s.peak_tflops is None and l40s.mfu is None
    assert (
        l40s.mfu_note == "L40S has no fp64 peak in the price catalog (it has fp32, tf32_tensor, bf16_tensor, "
        "fp16_tensor, fp8_tensor)"
    )
    assert l40s.cost_per_pflop == Decimal("0.005167"), "the FLOPs done do not depend on a peak"


def test_achieved_flops_query_and_window(prometheus_url: str) -> None:
    client = PrometheusClient(prometheus_url)
    half = achieved_flops_per_gpu(client, "llm/vllm-0", T0, T0 + HOUR / 2)
    assert half == pytest.approx(2.5e14, rel=1e-9), "a mean rate, whatever the window"
    assert achieved_flops_per_gpu(client, "4242", T0, T0 + HOUR) is None
    assert achieved_flops_per_gpu(client, "llm/vllm-0", T0, T0 + HOUR, selector='{cluster="elsewhere"}') is None
    assert achieved_flops_per_gpu(client, "llm/vllm-0", T0 + 2 * HOUR, T0 + 3 * HOUR) is None, "outside its data"
    raw = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": "count(vllm:estimated_flops_per_gpu_total)",
                                                               "time": (T0 + HOUR / 2).timestamp()}).json()  # fmt: skip
    assert raw["data"]["result"][0]["value"][1] == "2", "two vLLM engines loaded"


def test_formulas_by_hand() -> None:
    assert model_flops_utilization(494.75e12, Decimal("989.5")) == pytest.approx(0.5)
    assert model_flops_utilization(0.0, Decimal("312")) == 0
    with pytest.raises(ValueError, match="negative"):
        model_flops_utilization(-1.0, Decimal("312"))
    with pytest.raises(ValueError, match="not positive"):
        model_flops_utilization(1.0, Decimal("0"))
    assert cost_per_pflop(Decimal("12.29"), 1e18) == Decimal("0.012290")  # 1,000 PFLOP
    assert cost_per_pflop(Decimal("0.0000025"), 1e15) == Decimal("0.000002"), "half-even"
    assert cost_per_pflop(Decimal("5"), 0.0) is None
    with pytest.raises(ValueError, match=r"FLOPs: -1\.0 is negative"):
        cost_per_pflop(Decimal("5"), -1.0)
    with pytest.raises(ValueError, match="cost"):
        cost_per_pflop(Decimal("NaN"), 1e15)


def test_the_mfu_command(ledger: sessionmaker[Session], prometheus_url: str) -> None:
    database = ledger.kw["bind"].url.render_as_string(hide_password=False)
    period = ["--start", "2026-03-02T10:00:00Z", "--end", "2026-03-02T11:00:00Z"]
    env = {"FINOPS_DATABASE_URL": database, "FINOPS_PROMETHEUS_URL": prometheus_url}
    shown = CliRunner().invoke(app, ["mfu", *period, "--format", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    rows = {row["job"]: row for row in orjson.loads(shown.stdout)}
    assert rows["llm/vllm-0"]["mfu"] == pytest.approx(2.5e14 / 989.5e12, rel=1e-9)
    assert rows["llm/vllm-0"]["cost_per_pflop"] == "0.013656" and rows["llm/vllm-0"]["peak_tflops"] == "989.5"
    assert rows["llm/vllm-0"]["cost_per_million_tokens"] == "34.138889"
    assert rows["4242"]["mfu"] is None and rows["4242"]["cost_per_pflop"] is None
    assert rows["4242"]["mfu_note"] == NOT_REPORTED
    table = CliRunner().invoke(
        app, ["mfu", *period, "--job", "4242"], env=env | {"FINOPS_MFU_PRECISION": "fp16_tensor"}
    )
    assert table.exit_code == 0, table.output
    assert "4242" in table.stdout and "vllm-0" not in table.stdout and "peak: dense fp16_tensor" in table.stdout
    assert f"4242: no MFU: {NOT_REPORTED}" in table.stdout
    bad = CliRunner().invoke(app, ["mfu", *period, "--precision", "fp4"], env=env)
    assert bad.exit_code == 2 and "'fp4' must be one of fp64, fp64_tensor" in bad.output
    nowhere = CliRunner().invoke(app, ["mfu", *period], env={"FINOPS_DATABASE_URL": database})
    assert nowhere.exit_code == 2 and "FINOPS_PROMETHEUS_URL" in nowhere.output
