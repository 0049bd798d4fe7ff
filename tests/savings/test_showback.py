"""The monthly showback statement against figures computed by hand from a hand-written month
(:mod:`tests.support.showback_scenario`), on both databases; its text and CSV renderings; and the places where idle
cost by reason and right-sizing savings go, with rows and without."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from finops.analysis.budgets import UnknownTeam, set_budget
from finops.ledger.costmodel import CENT, quantize
from finops.savings import showback
from finops.savings.showback import SHOWN_ROWS, build_statement, idle_section, rightsizing_section, statement_teams
from finops.savings.showback_render import shown_rows, statement_csv, statement_text
from finops.savings.showback_statement import Column, IdleReason, Saving, Section
from tests.support import showback_scenario as scenario


def _column(section: Section, key: str) -> list[object]:
    index = [c.key for c in section.columns].index(key)
    return [row[index] for row in section.rows]


def _facts(section: Section) -> dict[str, object]:
    (row,) = section.rows
    return {c.key: v for c, v in zip(section.columns, row, strict=True)}


def test_statement_figures_match_the_hand_computation(sessions) -> None:  # type: ignore[no-untyped-def]
    scenario.seed(sessions)
    want = scenario.expected()
    with sessions() as session:
        assert statement_teams(session, scenario.MONTH, scenario.NOW) == ["nlp", "vision"]
        statement = build_statement(session, "vision", scenario.MONTH, scenario.NOW)
        nlp = build_statement(session, "nlp", scenario.MONTH, scenario.NOW)

    assert (statement.start, statement.end, statement.complete) == (scenario.MONTH, scenario.NEXT_MONTH, True)
    assert statement.currency == "USD" and statement.pending_hours == 0
    assert [s.key for s in statement.sections] == [
        "spend", "budget", "top_jobs", "top_users", "idle_by_reason", "efficiency", "inefficient_jobs", "rightsizing",
    ]  # fmt: skip

    spend = _facts(statement.section("spend"))
    assert spend["gpu_hours"] == pytest.approx(want.gpu_hours)
    assert (spend["allocated_cost"], spend["used_cost"], spend["idle_cost"]) == (want.spend, want.used, want.idle)
    assert spend["utilization_percent"] == want.utilization_percent
    assert "unpriced_gpu_hours" not in spend, "every GPU-hour is priced: no column of zeros"

    budget = _facts(statement.section("budget"))
    assert (budget["budget_scope"], budget["budget"], budget["spent"]) == ("whole team", Decimal("100.00"), want.spend)
    assert budget["used_percent"] == want.budget_used_percent and budget["budget_verdict"] == "within budget"
    assert "forecast" not in budget, "a closed month has no forecast"

    jobs = statement.section("top_jobs")
    assert _column(jobs, "job") == [key for key, *_ in want.jobs]
    assert _column(jobs, "user") == ["lars", "mei", "mei"]
    assert _column(jobs, "gpu_hours") == pytest.approx([hours for _, hours, _, _ in want.jobs])
    assert _column(jobs, "allocated_cost") == [cost for _, _, cost, _ in want.jobs]
    assert _column(jobs, "idle_cost") == [idle for *_, idle in want.jobs]
    assert jobs.total is not None and jobs.total[4:] == (want.spend, want.idle)
    users = statement.section("top_users")
    assert [(r[0], r[2], r[3]) for r in users.rows] == [(u, c, i) for u, _, c, i in want.users]

    idle = statement.section("idle_by_reason")
    assert [(reason, cost) for reason, _, cost in idle.rows] == [(title, cost) for title, _, cost in want.reasons]
    assert [hours for _, hours, _ in idle.rows] == pytest.approx([hours for _, hours, _ in want.reasons])
    assert idle.total is not None and idle.total[1:] == (pytest.approx(want.idle_gpu_hours), want.idle)
    assert "idle share of busy jobs' the unused share of jobs whose use is not low" in idle.note
    assert f"{want.episodes} idle episodes" in idle.note and f"{want.episode_gpu_hours:,.2f} GPU-hours" in idle.note

    # Job 7002 held two GPUs for 3 hours and used neither: one (the least a job keeps) would have saved 3 GPU-hours.
    rightsizing = statement.section("rightsizing")
    ((job, user, change, hours_saved, saving),) = rightsizing.rows
    assert (job, user, change, saving) == ("7002", "lars", "#SBATCH --gres=gpu:1", quantize(3 * scenario.rate(), CENT))
    assert hours_saved == pytest.approx(3.0)

    assert statement.summary.startswith(f"Team vision spent {want.spend:,.2f} USD on GPUs in October 2026")
    assert f"{want.budget_used_percent} % of its 100.00 USD budget" in statement.summary
    assert dict(statement.facts)["Idle cost"] == f"{want.idle:,.2f} USD"

    # No profiling data: SM activity not measured, with the fix, never 0 % nor a band; no job judged inefficient.
    efficiency = statement.section("efficiency")
    assert efficiency.rows == () and "SM activity: not measured" in efficiency.note
    assert "docs/collector.md#hardware-activity" in efficiency.note
    assert statement.section("inefficient_jobs").rows == ()
    assert statement.section("inefficient_jobs").note == "Not judged: SM activity not measured."

    # Team nlp: its own job only, and no budget said in so many words.
    assert _column(nlp.section("top_jobs"), "job") == ["7003"]
    assert _facts(nlp.section("spend"))["allocated_cost"] == quantize(2 * scenario.rate(), CENT)
    assert (
        nlp.section("budget").rows == () and "No budget was set for team nlp for 2026-10" in nlp.section("budget").note
    )

    # The CSV: every row of every section with rows, the rows of each table adding up to the spend.
    rows = list(csv.DictReader(io.StringIO(statement_csv(statement))))
    assert {r["section"] for r in rows} == {
        "spend", "budget", "top_jobs", "top_users", "idle_by_reason", "rightsizing",
    }, "the efficiency sections have no row: not measured"  # fmt: skip
    assert all((r["month"], r["team"], r["currency"]) == ("2026-10", "vision", "USD") for r in rows)
    for section in ("top_jobs", "top_users"):
        assert sum(Decimal(r["allocated_cost"]) for r in rows if r["section"] == section) == want.spend
    reason_rows = [(r["idle_reason"], Decimal(r["idle_cost"])) for r in rows if r["section"] == "idle_by_reason"]
    assert reason_rows == [(title, cost) for title, _, cost in want.reasons]

    text = statement_text(statement)
    assert text.startswith("GPU showback October 2026: team vision\n")
    assert "#SBATCH --gres=gpu:1" in text and "unexplained" in text and "idle share of busy jobs" in text


def test_month_to_date_statement_has_a_forecast(sessions) -> None:  # type: ignore[no-untyped-def]
    """November at 00:10 on its first day: job 7004's first November hour, the budget's forecast, "month to date"."""
    scenario.seed(sessions)
    with sessions.begin() as session:
        set_budget(session, "vision", Decimal(500), scenario.NEXT_MONTH, actor="system:test")
    with sessions() as session:
        statement = build_statement(session, "vision", scenario.NOW, scenario.NOW)
    assert (statement.start, statement.end, statement.complete) == (scenario.NEXT_MONTH, scenario.NOW, False)
    assert statement.title == "GPU showback November 2026 month to date: team vision"
    assert _facts(statement.section("spend"))["allocated_cost"] == quantize(scenario.rate(), CENT)
    budget = _facts(statement.section("budget"))
    assert budget["spent"] == quantize(scenario.rate(), CENT) and budget["forecast"] is not None
    assert "so far" in statement.summary


def test_unknown_team_and_future_month_are_refused(sessions) -> None:  # type: ignore[no-untyped-def]
    scenario.seed(sessions)
    with sessions() as session:
        with pytest.raises(UnknownTeam, match=r"team nobody has no jobs or rules yet; known teams: .*nlp, vision"):
            build_statement(session, "nobody", scenario.MONTH, scenario.NOW)
        with pytest.raises(ValueError, match="month 2026-12 has not begun"):
            build_statement(session, "vision", datetime(2026, 12, 1, tzinfo=UTC), scenario.NOW)


def test_idle_reasons_and_savings_fill_their_sections() -> None:
    """The idle and right-sizing sections from given rows: several reasons adding up to the idle cost in cents
    (largest remainder), a reason whose GPU-hours all lack a price shown without a cost (unknown, not 0) beside a
    column of unpriced GPU-hours; savings largest first with the unpriced one last and shown as unknown, not 0."""
    reasons = [
        IdleReason("waiting_on_storage", "waiting on storage", 2.5, Decimal("10.004")),
        IdleReason("over_requested", "over-requested", 1.0, Decimal("5.003")),
        IdleReason("unexplained", "unexplained", 0.5, Decimal("0.003")),
    ]
    section = idle_section(reasons, [])
    assert [row[0] for row in section.rows] == ["waiting on storage", "over-requested", "unexplained"]
    assert section.total is not None and section.total[2] == Decimal("15.01")
    assert sum(row[2] for row in section.rows) == section.total[2]  # type: ignore[misc]
    assert [c.key for c in section.columns] == ["idle_reason", "idle_gpu_hours", "idle_cost"], "no column of zeros"
    unpriced = idle_section(
        [
            IdleReason("no_reading", "no reading", 2.0, Decimal("13.76")),
            IdleReason("busy_job", "idle share of busy jobs", 0.5, Decimal(0), unpriced_gpu_hours=0.5),
        ],
        [],
    )
    assert unpriced.columns[-1].key == "idle_unpriced_gpu_hours"
    assert unpriced.rows == (("no reading", 2.0, Decimal("13.76"), 0.0), ("idle share of busy jobs", 0.5, None, 0.5))
    assert unpriced.total == ("Total", 2.5, Decimal("13.76"), 0.5)

    savings = [
        Saving("11", "mei", "#SBATCH --gres=gpu:h100:2", 4.0, Decimal("27.52")),
        Saving("12", "lars", "#SBATCH --gres=gpu:1g.10gb:1", 0.0, None),
        Saving("13", "ana", "#SBATCH --gres=gpu:h100:1", 8.0, Decimal("55.04")),
    ]
    section = rightsizing_section(savings)
    assert [row[0] for row in section.rows] == ["13", "11", "12"]
    assert section.rows[2][4] is None and section.total is not None and section.total[4] == Decimal("82.56")
    assert rightsizing_section([]).note.startswith("No job of the team would have cost less")


def test_long_tables_show_their_first_rows_and_sum_the_rest() -> None:
    columns = (Column("job", "Job", "text"), Column("gpu_hours", "GPU-hours", "hours"), Column("cost", "Cost", "money"))
    rows = tuple((str(n), 1.0, Decimal(n)) for n in range(SHOWN_ROWS + 3, 0, -1))
    total = ("Total", float(len(rows)), sum(r[2] for r in rows))
    section = Section("top_jobs", "Top jobs", columns, rows, total, shown=SHOWN_ROWS, noun="jobs")
    shown = shown_rows(section)
    assert len(shown) == SHOWN_ROWS + 1
    assert shown[-1] == ("3 more jobs (in the CSV)", 3.0, Decimal(6))
    assert sum(row[2] for row in shown) == section.total[2]  # type: ignore[index, misc]


def test_rows_past_the_limit_are_one_row_that_keeps_the_sums(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With room for two rows, vision's three jobs are the costliest and one row of the other two: the CSV still adds
    up to the spend."""
    monkeypatch.setattr(showback, "MAX_ROWS", 2)
    scenario.seed(sessions)
    want = scenario.expected()
    with sessions() as session:
        statement = build_statement(session, "vision", scenario.MONTH, scenario.NOW)
    jobs = statement.section("top_jobs")
    assert [row[0] for row in jobs.rows] == ["7002", "2 more jobs"]
    assert jobs.rows[1][3:] == (
        pytest.approx(5.0),
        want.jobs[1][2] + want.jobs[2][2],
        want.jobs[1][3] + want.jobs[2][3],
    )
    rows = list(csv.DictReader(io.StringIO(statement_csv(statement))))
    assert sum(Decimal(r["allocated_cost"]) for r in rows if r["section"] == "top_jobs") == want.spend


def test_efficiency_sections_of_a_profiled_month(sessions) -> None:  # type: ignore[no-untyped-def]
    """vision's jobs carried SM activity (:data:`tests.support.showback_scenario.PROFILED`): its SM activity 1.875 ÷ 11,
    band ineffective, SM-active cost 1.875 r and inactive cost 9.125 r; job 7001 busy but inefficient, memory-bound,
    4 r allocated and 3 r inactive; in the text and the CSV. nlp's GPU-hours carried none: not measured."""
    scenario.seed(sessions, profiled=True)
    r = scenario.rate()
    with sessions() as session:
        statement = build_statement(session, "vision", scenario.MONTH, scenario.NOW)
        nlp = build_statement(session, "nlp", scenario.MONTH, scenario.NOW)

    assert _facts(statement.section("efficiency")) == {
        "sm_active_percent": Decimal("17.0"),
        "efficiency_band": "ineffective",
        "profiled_percent": Decimal("100.0"),
        "sm_active_cost": quantize(Decimal("1.875") * r, CENT),
        "inactive_cost": quantize(Decimal("9.125") * r, CENT),
    }
    jobs = statement.section("inefficient_jobs")
    assert jobs.rows == (
        ("7001", "mei", "memory-bound", Decimal("95.0"), Decimal("25.0"), quantize(4 * r, CENT), quantize(3 * r, CENT)),
    )
    assert jobs.total == ("Total", "", "", "", "", quantize(4 * r, CENT), quantize(3 * r, CENT))
    assert "gpu-finops report --by efficiency" in jobs.note
    assert [row[0] for row in statement.section("rightsizing").rows] == ["7002"], "GPUs at SM activity 0 are idle"
    assert nlp.section("efficiency").rows == () and "not measured" in nlp.section("efficiency").note

    text = statement_text(statement)
    assert "GPU efficiency (SM activity)" in text and "SM activity:        17.0 %" in text
    assert "Band:               ineffective" in text
    line = next(line for line in text.splitlines() if "memory-bound" in line)
    assert line.split()[:3] == ["7001", "mei", "memory-bound"] and f"{quantize(3 * r, CENT):,.2f}" in line
    rows = list(csv.DictReader(io.StringIO(statement_csv(statement))))
    (team,) = [row for row in rows if row["section"] == "efficiency"]
    assert (team["sm_active_percent"], team["efficiency_band"], team["inactive_cost"]) == (
        "17.0", "ineffective", str(quantize(Decimal("9.125") * r, CENT)),
    )  # fmt: skip
    (job,) = [row for row in rows if row["section"] == "inefficient_jobs"]
    assert (job["job"], job["bottleneck"], job["allocated_cost"]) == (
        "7001",
        "memory-bound",
        str(quantize(4 * r, CENT)),
    )


def test_inefficient_jobs_past_the_limit_are_summed() -> None:
    """More busy-but-inefficient jobs than rows: the last row sums the rest, the total still adds up; the e-mail and
    the text show the first few and one line for the others."""
    from finops.savings.bottlenecks import Bottleneck
    from finops.savings.efficiency import ActivitySum, JobEfficiency
    from finops.savings.efficiency_policy import EfficiencyPolicy
    from finops.savings.showback_efficiency import SHOWN_JOBS, inefficient_section

    def job(number: int) -> JobEfficiency:
        return JobEfficiency(
            job_pk=number, job_id=str(number), name="", team="t", user="u", gpus=1, start=None, end=None,
            gpu_seconds=3600, held_gpu_seconds=3600, profiled_gpu_seconds=3600, utilization=0.9,
            activities={"sm_active": ActivitySum(720.0, 3600)}, allocated_cost=Decimal("1.005"),
            unpriced_gpu_seconds=0, sm_active_cost=Decimal("0.201"), measured_cost=Decimal("1.005"), currency="USD",
            band="ineffective", bottleneck=Bottleneck("unexplained", "nothing stood out"),
        )  # fmt: skip

    jobs = [job(n) for n in range(SHOWN_JOBS + 4)]
    section = inefficient_section(jobs, EfficiencyPolicy(), measured=True, max_rows=SHOWN_JOBS + 2)
    assert len(section.rows) == SHOWN_JOBS + 2 and section.rows[-1][0] == "3 more jobs"
    assert section.total is not None and section.total[5] == sum(row[5] for row in section.rows)  # type: ignore[misc]
    assert section.total[5] == round_total(Decimal("1.005") * len(jobs))
    shown = shown_rows(section)
    assert len(shown) == SHOWN_JOBS + 1 and shown[-1][0] == "2 more jobs (in the CSV)"
    assert inefficient_section([], EfficiencyPolicy(), measured=True, max_rows=10).note.startswith(
        "No job of the team had utilisation 80% or more"
    )


def round_total(amount: Decimal) -> Decimal:
    return quantize(amount, CENT)
