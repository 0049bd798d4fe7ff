"""A site's own Slurm history with no collector at all, through the command line, accounts for every GPU-hour:
priced, or said to be unpriced with its model and the fix (both databases).

``tests/fixtures/sacct/sacct_site_history.txt`` (see ``tests/fixtures/sacct/SOURCE.md``) mixes GPU types the
catalogue knows (a100, h100, l40s, mi250x), untyped ``gres/gpu=N`` on nodes the scontrol inventory knows (with a
catalogue model, with a type no model has, untyped) and on nodes nobody knows, types the catalogue does not know
(v100, a40), steps, an array, a CPU-only, a pending and a never-started job. The expected GPU-seconds are computed
here from the two fixture files with plain string handling, not with the parsers under test.

An old history creates no capacity beyond its jobs' hours: the inventory, imported now, puts its nodes' GPUs in
service from now on, and a GPU only the job import knows is in service only while jobs held it, so the ledger of
the history's days holds the jobs' rows and nothing unallocated.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import yaml
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

import finops.pricing
from finops.analysis.report import unpriced_by_model
from finops.cli import app
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job

FIXTURES = Path(__file__).parents[1] / "fixtures"
SACCT = FIXTURES / "sacct" / "sacct_site_history.txt"
SCONTROL = FIXTURES / "scontrol" / "scontrol_nodes_oneliner.txt"
START, END = datetime(2026, 10, 4, tzinfo=UTC), datetime(2026, 10, 6, tzinfo=UTC)
PERIOD = ["--start", START.isoformat(), "--end", END.isoformat()]

CATALOGUE = {  # GRES types (lower case) of the fixtures that the packaged catalogue names, written out by hand
    "a100": "A100-SXM4-80GB",
    "h100": "H100-SXM-80GB",
    "nvidia_h100_80gb_hbm3": "H100-SXM-80GB",
    "l40s": "L40S",
    "mi250x": "MI250X",
    "mi300x": "MI300X",
}
ON_DEMAND = {  # the packaged on-demand rates in force in October 2026, USD per GPU-hour
    "A100-SXM4-80GB": Decimal("3.43088125"),
    "H100-SXM-80GB": Decimal("6.88"),
    "L40S": Decimal("1.861"),
    "MI250X": Decimal("1.35"),
    "MI300X": Decimal("6.00"),
}


@dataclass(frozen=True)
class Expected:
    """One GPU job of the fixture: GPU-seconds (GPUs × elapsed) by the model its GPUs should be priced as (a
    catalogue key), or by the name they are left unpriced under."""

    job_id_raw: str
    gpu_seconds: int
    model: str
    priced: bool


def _expand(nodelist: str) -> list[str]:
    """``gpu-q-[01-02]`` / ``gpu-h-[01,04]`` / ``gpu-a-01`` (one bracket, as the fixture writes them)."""
    if "[" not in nodelist:
        return [nodelist]
    prefix, ranges = nodelist.rstrip("]").split("[")
    names = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        names += [f"{prefix}{i:0{len(low)}d}" for i in range(int(low), int(high or low) + 1)]
    return names


def _inventory() -> dict[str, str | None]:
    """Hostname → the GRES type scontrol gives it (lower case), None for untyped GPUs; readable lines only."""
    types: dict[str, str | None] = {}
    for line in SCONTROL.read_text().splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f and f.split("=", 1)[0].isalpha())
        gres = fields.get("Gres", "(null)").split("(")[0].split(",")[0].split(":")
        if gres[0] != "gpu" or not all(p.replace(".", "").replace("_", "").isalnum() for p in gres):
            continue
        if len(gres) == 2:
            types[fields["NodeName"]] = None
        elif len(gres) == 3 and "." not in gres[1]:
            types[fields["NodeName"]] = gres[1].lower()
    return types


def _expected() -> list[Expected]:
    """Every job line of the sacct fixture that held GPUs: its GPU-seconds and the model they should be priced
    as: the inventory's type of its nodes, else its own GRES type, else ``unknown``."""
    inventory = _inventory()
    jobs = []
    for line in SACCT.read_text().splitlines():
        job_id, job_id_raw, *_, start, end, elapsed, _state, tres, nodelist, _name = line.split("|")
        if "." in job_id or start == "Unknown":
            continue
        counts = dict(item.split("=", 1) for item in tres.split(",") if item.startswith("gres/gpu"))
        gpus = int(counts.get("gres/gpu", 0))
        if not gpus:
            continue
        seconds = int((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
        h, m, s = (int(x) for x in elapsed.split(":"))
        assert seconds == h * 3600 + m * 60 + s, f"{job_id}: End - Start is its Elapsed"
        typed = [key.split(":", 1)[1].lower() for key in counts if ":" in key]
        nodes = _expand(nodelist)
        by_node = {inventory.get(node) for node in nodes}
        raw = by_node.pop() if len(by_node) == 1 and None not in by_node else (typed[0] if typed else None)
        for node in nodes:  # a job over a known and an unknown node: the fixture keeps both the same model
            assert inventory.get(node) in (None, raw), f"{job_id}: mixed models"
        model = CATALOGUE.get(raw, raw) if raw else "unknown"
        jobs.append(Expected(job_id_raw, gpus * seconds, model, raw in CATALOGUE))
    return jobs


def _invoke(runner: CliRunner, *args: str, exit_code: int = 0) -> Result:
    result = runner.invoke(app, list(args))
    assert result.exit_code == exit_code, result.output
    return result


def _ledger_by_job(session) -> dict[str, tuple[int, int, str, Decimal]]:  # type: ignore[no-untyped-def]
    """JobIDRaw → (GPU-seconds, of them unpriced, GPU models, allocated cost of the priced rows) from the jobs'
    ledger rows."""
    rows = session.execute(
        select(
            Job.job_id_raw,
            Gpu.model,
            LedgerEntry.allocated_cost.is_(None),
            func.sum(LedgerEntry.seconds),
            func.sum(LedgerEntry.allocated_cost),
        )
        .join(Job, Job.id == LedgerEntry.job_pk)
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(LedgerEntry.hour >= START, LedgerEntry.hour < END)
        .group_by(Job.job_id_raw, Gpu.model, LedgerEntry.allocated_cost.is_(None))
    ).all()
    totals: dict[str, list] = defaultdict(lambda: [0, 0, set(), Decimal(0)])  # type: ignore[type-arg]
    for job_id_raw, model, unpriced, seconds, cost in rows:
        total = totals[job_id_raw]
        total[0] += int(seconds)
        total[1] += int(seconds) if unpriced else 0
        total[2].add(model)
        total[3] += Decimal(cost or 0)
    return {job: (s, u, ",".join(sorted(m)), c) for job, (s, u, m, c) in totals.items()}


def _report(runner: CliRunner) -> tuple[list[dict[str, object]], list[str]]:
    """The job report's rows and its ``unpriced:`` notes (stderr); every other stderr line is an ``estimate:`` note
    (a price resting on an estimate: the site's MI250X), which is checked here."""
    result = _invoke(runner, "report", *PERIOD, "--by", "job", "--format", "json")
    lines = [line for line in result.stderr.splitlines() if line]
    unpriced = [line for line in lines if line.startswith("unpriced: ")]
    estimates = [line for line in lines if line not in unpriced]
    assert all(line.startswith("estimate: ") and " of MI250X " in line for line in estimates), estimates
    return orjson.loads(result.stdout), unpriced


def _catalogue_with(tmp_path: Path, **rates: tuple[str, str]) -> Path:
    """The packaged catalogue plus models ``KEY=(alias, on-demand rate)``."""
    document = yaml.safe_load((Path(finops.pricing.__file__).parent / "price_catalog.yaml").read_text())
    for key, (alias, rate) in rates.items():
        document["models"][key] = {
            "description": f"{key} (a site's own rate, for this test)",
            "aliases": [alias],
            "match": [rf"\b{key}\b"],
            "prices": [
                {
                    "pricing_model": "on-demand",
                    "effective_from": "2026-01-01",
                    "rate": rate,
                    "sources": [{"url": "https://example.invalid/contract", "note": "test rate"}],
                }
            ],
        }
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_site_history_accounts_for_every_gpu_hour(sessions, engine, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    monkeypatch.delenv("FINOPS_PRICING_MODEL", raising=False)
    monkeypatch.delenv("FINOPS_PRICE_CATALOG", raising=False)
    runner = CliRunner()
    expected = _expected()
    assert len(expected) == 16 and len({e.job_id_raw for e in expected}) == 16
    unpriced_models = {e.model for e in expected if not e.priced}
    assert unpriced_models == {"v100", "a40", "unknown"}
    assert {e.model for e in expected if e.priced} == set(ON_DEMAND)

    nodes = _invoke(runner, "nodes", "import", str(SCONTROL), exit_code=1)  # its two bad lines
    assert nodes.stdout.splitlines()[-1].startswith("rollup: ")
    imported = _invoke(runner, "import", "sacct", str(SACCT)).stdout.splitlines()
    assert imported[0] == "imported 16 GPU jobs; 3 without GPUs; 0 bad lines"
    assert imported[1].startswith("rollup: ")

    # every job's GPU-hours are in the ledger, priced when its model resolves, unpriced under its model else
    with sessions() as session:
        ledger = _ledger_by_job(session)
        unpriced = {u.model: u.gpu_seconds for u in unpriced_by_model(session, START, END, team="__unmapped__")}
        fixes = {u.model: u.fix for u in unpriced_by_model(session, START, END)}
    assert set(ledger) == {e.job_id_raw for e in expected}
    for e in expected:
        seconds, unpriced_seconds, models, _ = ledger[e.job_id_raw]
        assert seconds == e.gpu_seconds, f"job {e.job_id_raw}: ledger {seconds} GPU-s, fixture {e.gpu_seconds}"
        assert unpriced_seconds == (0 if e.priced else e.gpu_seconds), f"job {e.job_id_raw} on {models}"
        if not e.priced:
            assert models == e.model, f"job {e.job_id_raw}: unpriced under {models}, expected {e.model}"
    assert sum(s for s, _, _, _ in ledger.values()) == sum(e.gpu_seconds for e in expected)
    assert sum(s - u for s, u, _, _ in ledger.values()) == sum(e.gpu_seconds for e in expected if e.priced)
    with sessions() as session:
        capacity = session.scalar(
            select(func.sum(LedgerEntry.seconds)).where(LedgerEntry.hour >= START, LedgerEntry.hour < END)
        )
    assert capacity == sum(e.gpu_seconds for e in expected), "no capacity beyond the jobs' GPU-seconds"
    by_model: Counter[str] = Counter()
    for e in expected:
        if not e.priced:
            by_model[e.model] += e.gpu_seconds
    assert unpriced == dict(by_model), "the jobs' unpriced GPU-hours by model (all jobs bill __unmapped__)"
    assert set(fixes) == unpriced_models and all("gpu-finops prices import" in fix for fix in fixes.values())

    # the money of the priced jobs is their GPU-hours at the on-demand rate, to the rounding of each ledger row
    priced_money = sum(ledger[e.job_id_raw][3] for e in expected if e.priced)
    by_rate = sum(ON_DEMAND[e.model] * e.gpu_seconds / 3600 for e in expected if e.priced)
    assert abs(priced_money - by_rate) < Decimal("0.0001")
    assert all(ledger[e.job_id_raw][3] == 0 for e in expected if not e.priced)

    # report: money only for the priced rows; a job whose GPU-hours are all unpriced has no cost; stderr names them
    rows, notes = _report(runner)
    jobs = {row["job"]: row for row in rows if row["job"] != "__unallocated__"}
    with sessions() as session:
        all_priced = session.scalar(
            select(func.sum(LedgerEntry.allocated_cost)).where(LedgerEntry.hour >= START, LedgerEntry.hour < END)
        )
    total = sum(Decimal(str(row["allocated_cost"])) for row in rows if row["allocated_cost"] is not None)
    assert total == Decimal(all_priced).quantize(Decimal("0.01"))
    with sessions() as session:
        raw_of = {job: raw for job, raw in session.execute(select(Job.job_id, Job.job_id_raw))}
    assert {raw_of[str(key)] for key, row in jobs.items() if row["allocated_cost"] is None} == {
        e.job_id_raw for e in expected if not e.priced
    }
    assert sorted(line.split(" of ")[1].split(" ")[0] for line in notes) == sorted(unpriced_models)
    assert all(line.startswith("unpriced: ") and "(not in the costs)" in line for line in notes)

    # set the untyped nodes' models and price the unknown types: the hours are priced with no separate rollup
    _invoke(runner, "nodes", "set-model", "--partition", "legacy", "l40s")  # gpu-u-01 (untyped), gpu-v-01 (v100)
    for node in ("gpu-q-01", "gpu-q-02", "gpu-r-07"):
        assert _invoke(runner, "nodes", "set-model", node, "a100").stdout.splitlines()[-1].startswith("rollup: ")
    with sessions() as session:
        left = {u.model for u in unpriced_by_model(session, START, END)}
    assert left == {"v100", "a40"}, "the v100 and a40 jobs' own GRES types on nodes the inventory does not know"
    catalogue = _catalogue_with(tmp_path, A40=("a40", "0.90"), V100=("v100", "0.55"))
    assert _invoke(runner, "prices", "import", str(catalogue)).stdout.splitlines()[-1].startswith("rollup: ")
    with sessions() as session:
        ledger = _ledger_by_job(session)
        assert unpriced_by_model(session, START, END) == []
    assert sum(s for s, _, _, _ in ledger.values()) == sum(e.gpu_seconds for e in expected)
    assert all(u == 0 for _, u, _, _ in ledger.values())
    rows, notes = _report(runner)
    assert notes == [] and all(row["allocated_cost"] is not None for row in rows)
    assert {row["ledger_hours_pending"] for row in rows} == {0}, "rolled up by the commands themselves"
