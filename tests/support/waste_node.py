"""Nodes run through the collector's own code for the waste reason tests: the ``nvml`` source on GPUs that answer
with the rows of real nvidia-smi captures (:mod:`tests.support.fake_pynvml`), the node sources on real fabric and
storage captures (:mod:`tests.support.captured_node`), the ``node_io`` rates of :class:`collector.node_io.NodeIoRates`,
each cycle stored by the service's :class:`finops.ingest.readings.Ingestor`.

DERIVED: a capture is one instant of one GPU. A node's GPUs here are capture rows put side by side, each given its own
index and UUID (as :mod:`tests.support.node_fixture` does), read again at every cycle: a GPU's readings are the
row's values, constant while its plan names that row. A row may be edited (:func:`edited`) where a test says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from collector.contract import wire
from collector.contract.wire import IngestBatch
from collector.node_io import NodeIoRates
from collector.sources.nvml import NvmlSource
from finops.ingest.readings import Ingestor
from tests.support.captured_node import CapturedNode
from tests.support.fake_pynvml import CAPTURES, FakeNvml, ManualClock, query_gpu_rows

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
RTX_4080 = "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
L40S = "linux-x86_64__nvidia-l40s__595.80.txt"

Row = dict[str, str]


def capture_row(shared_data: Path, capture: str, state: str) -> Row:
    """The one GPU's ``state`` (``idle``/``load``) query-gpu row of ``capture``."""
    (row,) = query_gpu_rows(shared_data / CAPTURES / capture, state)
    return row


def edited(row: Row, **cells: str) -> Row:
    """DERIVED: ``row`` with some cells replaced (``**{"clocks_event_reasons.active": "0x…04"}``)."""
    return {**row, **cells}


@dataclass(frozen=True)
class GpuPlan:
    """One GPU of a node: the capture row it answers with at each minute of the run (``row(minute)``) and the job
    holding it (its readings carry the job's id, as the collector's job map puts it)."""

    row: Callable[[float], Row]
    job_id: str


def steady(row: Row, job_id: str) -> GpuPlan:
    """A GPU answering ``row`` throughout, held by ``job_id``."""
    return GpuPlan(lambda _minute: row, job_id)


def switching(before: Row, after: Row, at_minute: float, job_id: str) -> GpuPlan:
    """A GPU answering ``before`` until ``at_minute``, then ``after``."""
    return GpuPlan(lambda minute: before if minute < at_minute else after, job_id)


def run_node(
    sessions,  # type: ignore[no-untyped-def]
    node: str,
    plans: Sequence[GpuPlan],
    start: datetime,
    minutes: int,
    *,
    captured: CapturedNode | None = None,
    grow: Callable[[CapturedNode, int], None] | None = None,
    interval_seconds: int = 60,
) -> None:
    """Collect ``node`` every ``interval_seconds`` over [start, start + minutes] and store each cycle's batch (its
    GPU readings, and its ``node_io`` entry when ``captured`` fabric and storage counters are read). ``grow`` is
    called before each cycle but the first with the captured node and the seconds since the previous cycle, to
    let counters grow (DERIVED traffic on the captured counters)."""
    clock = ManualClock(start)
    uuid_of = {index: f"GPU-{node}-{index:04d}" for index in range(len(plans))}
    fake = FakeNvml([], clock)
    nvml = NvmlSource(fake, clock)
    sources = captured.sources(clock) if captured is not None else []
    rates, ingestor = NodeIoRates(), Ingestor()
    for cycle in range(minutes * 60 // interval_seconds + 1):
        minute = cycle * interval_seconds / 60
        fake.gpus[:] = [{**plan.row(minute), "index": str(i), "uuid": uuid_of[i]} for i, plan in enumerate(plans)]
        if cycle and captured is not None and grow is not None:
            grow(captured, interval_seconds)
        samples = [
            replace(s, job_id=plans[int(s.labels["gpu"])].job_id) if s.entity == "gpu" else s for s in nvml.collect()
        ]
        samples += [sample for source in sources for sample in source.collect()]
        batch = wire.batch_dict(samples)
        entry = rates.entry(samples)
        if entry is not None:
            batch["node_io"] = [entry]
        with sessions.begin() as session:
            ingestor.store(session, IngestBatch.model_validate({"node": node, **wire.columnar(batch)}))
        clock.advance(interval_seconds)


def sacct_line(job_id: str, account: str, node: str, gpus: int, start: datetime, minutes: int, name: str = "train",
               partition: str = "gpu") -> str:  # fmt: skip
    """A completed job in ``sacct --parsable2 --noheader`` format (times UTC) on ``node`` with ``gpus`` H100 GPUs."""
    stamp = "%Y-%m-%dT%H:%M:%S"
    end = start + timedelta(minutes=minutes)
    return (
        f"{job_id}|{job_id}|orion|{partition}|{account}|user-{account}|{start:{stamp}}|{start:{stamp}}|{end:{stamp}}|"
        f"{minutes // 60:02d}:{minutes % 60:02d}:00|COMPLETED|"
        f"billing=8,cpu=8,gres/gpu:h100={gpus},gres/gpu={gpus},mem=64G,node=1|{node}|{name}"
    )
