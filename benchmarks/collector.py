"""Collector cost: CPU per collection cycle and RSS, and /metrics scrape time against node_exporter.

Run: ``.venv/bin/python benchmarks/collector.py [--cycles N] [--scrapes N]``. Reads ``../shared/data`` in place
(``FINOPS_SHARED_DATA`` to point elsewhere). Prints figures; asserts nothing about time.

1. One full cycle of an 8-GPU node: nvml (fake ``pynvml`` over the real H100 capture, 8 GPUs: see
   ``tests/support/node_fixture.py``), infiniband and diskstats over ``procfs-fixtures``, nfs over
   ``node-exporter-fixtures``, lustre over ``lustre-procfs-hpe``, plus spooling the readings. CPU time per cycle
   (``time.process_time``), and the RSS of a collector process (``gpu-finops collector`` with every source, on
   this GPU-less host) beside that of ``prometheus-node-exporter``.
2. ``/metrics`` scrape latency of ``gpu-finops collector --source infiniband --source diskstats`` against
   Debian's ``prometheus-node-exporter --collector.disable-defaults --collector.infiniband
   --collector.diskstats`` on the same ``--path.procfs``/``--path.sysfs`` fixture roots, alternating scrapes in
   the same run; the ratio is the figure (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collector.agent import Agent  # noqa: E402
from collector.contract.sample import Source  # noqa: E402
from collector.delivery import Delivery  # noqa: E402
from collector.exposition import LatestSamples  # noqa: E402
from collector.jobmap.mapper import JobMapper  # noqa: E402
from collector.shipper import Shipper  # noqa: E402
from collector.sources.diskstats import DiskstatsSource  # noqa: E402
from collector.sources.infiniband import InfinibandSource  # noqa: E402
from collector.sources.lustre import LustreSource  # noqa: E402
from collector.sources.nfs import NfsSource  # noqa: E402
from collector.sources.nvml import NvmlSource  # noqa: E402
from collector.spool import Spool  # noqa: E402
from tests.support.environment import shared_data_dir  # noqa: E402
from tests.support.fake_pynvml import ManualClock  # noqa: E402
from tests.support.node_fixture import eight_h100_nvml  # noqa: E402
from tests.support.servers import free_port  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, seconds (/proc/<pid>/stat fields 14 and 15, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    """Resident set size of a process, MiB (``VmRSS`` in /proc/<pid>/status, kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cycle_cpu(shared: Path, cycles: int, spool_dir: Path) -> None:
    clock = ManualClock()
    procfs = shared / "procfs-fixtures"
    sources: list[Source] = [
        NvmlSource(eight_h100_nvml(shared, clock), clock),
        InfinibandSource(procfs / "sys"),
        DiskstatsSource(procfs / "proc", procfs / "sys"),
        NfsSource(shared / "node-exporter-fixtures/proc/10/mountstats"),
        LustreSource(shared / "lustre-procfs-hpe/proc"),
    ]
    delivery = Delivery(Spool(spool_dir), Shipper("http://127.0.0.1:9", "unused", "bench"))
    agent = Agent(sources, LatestSamples(), delivery.enqueue, annotate=JobMapper(None, Path("/proc")).annotate)
    agent.cycle()  # warm-up: imports, first reads
    started = time.process_time()
    for _ in range(cycles):
        clock.advance(10)
        agent.cycle()
    per_cycle_ms = (time.process_time() - started) / cycles * 1000
    samples = sum(len(s.collect()) for s in sources)
    print(f"full cycle, 8 GPUs + IB + disks + NFS + Lustre, job map, spooled: {per_cycle_ms:.2f} ms CPU per cycle "
          f"({cycles} cycles, {samples} samples per cycle; goal <= 5 ms)")  # fmt: skip


@contextmanager
def _process(command: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "FINOPS_INGEST_TOKEN": "unused"}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if "_success" in httpx.get(f"http://127.0.0.1:{port}/metrics").text:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not serve /metrics")
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def scrape_versus_node_exporter(shared: Path, scrapes: int, spool_dir: Path) -> None:
    node_exporter = shutil.which("prometheus-node-exporter")
    if node_exporter is None:
        print("prometheus-node-exporter is not installed (Debian package): scrape comparison skipped")
        return
    root = shared / "procfs-fixtures"
    ours_port, theirs_port = free_port(), free_port()
    ours = [sys.executable, "-m", "finops.cli", "collector", "--service-url", "http://127.0.0.1:9",
            "--source", "infiniband", "--source", "diskstats", "--proc-root", str(root / "proc"),
            "--sys-root", str(root / "sys"), "--metrics-address", "127.0.0.1", "--metrics-port", str(ours_port),
            "--spool-dir", str(spool_dir / "scrape"), "--interval", "10"]  # fmt: skip
    theirs = [node_exporter, "--collector.disable-defaults", "--collector.infiniband", "--collector.diskstats",
              f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
              f"--web.listen-address=127.0.0.1:{theirs_port}"]  # fmt: skip
    with _process(ours, ours_port) as ours_process, _process(theirs, theirs_port) as theirs_process:
        times: dict[str, list[float]] = {"gpu-finops": [], "node_exporter": []}
        sizes: dict[str, int] = {}
        pids = {"gpu-finops": ours_process.pid, "node_exporter": theirs_process.pid}
        cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        with httpx.Client() as client:
            for _ in range(scrapes):
                for name, port in (("gpu-finops", ours_port), ("node_exporter", theirs_port)):
                    started = time.perf_counter()
                    text = client.get(f"http://127.0.0.1:{port}/metrics").text
                    times[name].append(time.perf_counter() - started)
                    sizes[name] = len(text)
        cpu = {name: (_cpu_seconds(pid) - cpu_before[name]) / scrapes * 1000 for name, pid in pids.items()}
        rss = {name: _rss_mib(pid) for name, pid in pids.items()}
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    for name in times:
        print(
            f"/metrics scrape, {name:13}: median {median[name]:.2f} ms over {scrapes} scrapes, "
            f"{cpu[name]:.2f} ms CPU per scrape, {sizes[name]:,} bytes, RSS {rss[name]:.1f} MiB"
        )
    print(f"scrape time ratio gpu-finops / node_exporter: {median['gpu-finops'] / median['node_exporter']:.2f}")


def collector_rss(spool_dir: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "collector", "--service-url", "http://127.0.0.1:9",
               "--metrics-address", "127.0.0.1", "--metrics-port", str(port), "--spool-dir", str(spool_dir / "rss"),
               "--interval", "1"]  # fmt: skip
    with _process(command, port) as process:
        time.sleep(3)
        print(f"gpu-finops collector process, default sources, RSS {_rss_mib(process.pid):.1f} MiB (goal <= 60 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    shared = shared_data_dir()
    if not (shared / "INDEX.md").is_file():
        sys.exit(f"real data folder {shared} is missing (set FINOPS_SHARED_DATA)")
    with tempfile.TemporaryDirectory() as tmp:
        cycle_cpu(shared, args.cycles, Path(tmp) / "cycle")
        collector_rss(Path(tmp))
        scrape_versus_node_exporter(shared, args.scrapes, Path(tmp))


if __name__ == "__main__":
    main()
