"""The demo week end to end (``gpu-finops demo --headless``), this checkout beside another, alternated in one run.

Usage::

    .venv/bin/python benchmarks/demo.py BASELINE_CHECKOUT [--rounds 2] [--end 2026-11-29T06:00Z]

Each round runs the demo of ``BASELINE_CHECKOUT`` (a clone of the project at the code to compare with, its
``../shared`` reachable as this one's is) and then this checkout's, each in its own checkout folder with a fresh
``data/`` (as a fresh clone has), with this interpreter and ``--report-json``. The replayed week ends at ``--end``
in both (the demo's clock, :func:`finops.demo.runner.utc_now`, set to it), so that the two reports can be compared
byte for byte. Prints per run the wall-clock seconds, the CPU seconds of the demo and its service process, the
ingest and ledger phases as the demo printed them, the load average before and after, whether the report is the
baseline's byte for byte, and the median wall times' ratio. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PINNED = """
import sys
from datetime import datetime
import finops.demo.runner as runner
end = datetime.fromisoformat(sys.argv[1])
runner.utc_now = lambda: end
from finops.cli import app
sys.argv = ["gpu-finops", "demo", "--headless", "--report-json", sys.argv[2]]
app()
"""
PHASES = re.compile(r"^(ingest|ledger): .* in ([\d.]+) s", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    """One demo: wall and CPU seconds (its service's included), the load average before and after, and the seconds
    of its ingest and ledger phases as it printed them (0 when it printed none)."""

    wall: float
    cpu: float
    load_before: float
    load_after: float
    ingest: float
    ledger: float


def run(checkout: Path, end: datetime, report: Path) -> Run:
    """One demo in ``checkout`` from a fresh ``data/``, the report written to ``report``."""
    shutil.rmtree(checkout / "data", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PINNED, end.isoformat(), str(report)],
        cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phases = {name: float(seconds) for name, seconds in PHASES.findall(done.stdout)}
    return Run(wall, cpu, load, os.getloadavg()[0], phases.get("ingest", 0.0), phases.get("ledger", 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--end", default="2026-11-29T06:00+00:00")
    args = parser.parse_args()
    end = datetime.fromisoformat(args.end)
    checkouts = {"baseline": args.baseline.resolve(), "this": HERE}
    walls: dict[str, list[float]] = {name: [] for name in checkouts}
    reports = Path(os.environ.get("TMPDIR", "/tmp"))
    for round_number in range(1, args.rounds + 1):
        for name, checkout in checkouts.items():
            report = reports / f"demo-report-{name}-{round_number}.json"
            figures = run(checkout, end, report)
            walls[name].append(figures.wall)
            same = report.read_bytes() == (reports / f"demo-report-baseline-{round_number}.json").read_bytes()
            print(
                f"round {round_number} {name:8}: {figures.wall:6.1f} s wall, {figures.cpu:6.1f} s CPU "
                f"(ingest {figures.ingest:5.1f} s, ledger {figures.ledger:5.1f} s), "
                f"load {figures.load_before:.2f} -> {figures.load_after:.2f}, "
                f"report {'= baseline' if same else 'DIFFERS'}",
                flush=True,
            )
    ratio = statistics.median(walls["this"]) / statistics.median(walls["baseline"])
    print(f"median wall: this {statistics.median(walls['this']):.1f} s, baseline "
          f"{statistics.median(walls['baseline']):.1f} s ({ratio:.2f} x)")  # fmt: skip


if __name__ == "__main__":
    main()
