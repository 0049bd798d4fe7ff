"""Replays recorded GPU readings as if they came from live GPUs: the demo's workload, or an nvidia-smi capture
(``gpu-finops collector --source replay --replay-file CAPTURE``), so the whole path (collector, spool, service,
ledger) can be tried on a machine without a GPU.

Capture format (:func:`capture_steps`), either of:

- the output of ``nvidia-smi --query-gpu=FIELDS --format=csv`` (``nvidia-smi --help-query-gpu``; the fields must
  include ``index``, ``uuid`` and ``name``; those :mod:`collector.sources.nvidia_smi` reads are used, the others
  ignored), once or many times: with ``-l SECONDS`` nvidia-smi prints the header once and a line per GPU each time,
  appended runs repeat the header. A repeated header, or a GPU seen again, starts the next step;
- a capture of nvidia_gpu_exporter's ``collect.sh`` (``internal/captures/*.txt`` of
  github.com/utkuozdemir/nvidia_gpu_exporter): sections between ``####`` banner lines, each titled
  ``# <state> :: <name>`` and ``# $ <command>``; each ``--query-gpu=… --format=csv`` section is a step (``idle``,
  then ``load``).

One step is one cycle's readings, converted as the ``nvidia_smi`` source converts them: no energy counter (nvidia-smi
has no energy field), no processes.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from collector.contract.sample import Sample, utc_now
from collector.sources.nvidia_smi import samples_from_csv

BANNER = re.compile(r"^#{20,}[ \t]*\n", re.MULTILINE)
"""The line of ``#`` around the section titles of an nvidia_gpu_exporter capture."""


class ReplaySource:
    """Each ``collect`` returns the next recorded step (a list of samples, e.g. the demo's 20 hours of one node's GPUs).

    ``exhausted`` turns True once every step has been played; ``collect`` then returns ``[]``.
    """

    name = "replay"

    def __init__(self, steps: Iterable[list[Sample]]) -> None:
        self._steps = iter(steps)
        self.exhausted = False

    def collect(self) -> list[Sample]:
        """The next step's samples, or ``[]`` once the recording is over."""
        try:
            return next(self._steps)
        except StopIteration:
            self.exhausted = True
            return []


def live(steps: list[list[Sample]], clock: Callable[[], datetime] = utc_now) -> Iterator[list[Sample]]:
    """``steps`` over and over, each step's readings stamped with ``clock()`` when it is taken: a
    :class:`ReplaySource` of them reads like GPUs read now."""
    for step in itertools.cycle(steps):
        now = clock()
        yield [dataclasses.replace(sample, timestamp=now) for sample in step]


def capture_steps(path: Path) -> list[list[Sample]]:
    """The steps of the capture file ``path`` (the module gives the format), stamped with the file's modification
    time (:func:`live` restamps them). ValueError naming the file when it cannot be read or holds no GPU line;
    a malformed line is logged (file and line) and skipped, as the ``nvidia_smi`` source does."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    steps: list[list[Sample]] = []
    for block in _csv_blocks(text):
        step: list[Sample] = []
        for sample in samples_from_csv(block, stamp, str(path)):
            if any(seen.labels["uuid"] == sample.labels["uuid"] for seen in step):
                steps.append(step)
                step = []
            step.append(sample)
        if step:
            steps.append(step)
    if not steps:
        raise ValueError(f"{path}: no GPU line of `nvidia-smi --query-gpu=index,uuid,name,… --format=csv`")
    return steps


def _csv_blocks(text: str) -> list[str]:
    """The ``--query-gpu`` CSV outputs of a capture, each with its header line first."""
    parts = BANNER.split(text)
    if len(parts) > 1:  # banner, title, banner, body, …: parts[1::2] titles, parts[2::2] bodies
        return [body for title, body in zip(parts[1::2], parts[2::2], strict=False) if _is_query_gpu(title)]
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header, blocks = lines[0], []
    for line in lines:
        if line == header:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return ["\n".join(block) for block in blocks]


def _is_query_gpu(title: str) -> bool:
    return any(
        line.startswith("# $ ") and "--query-gpu=" in line and "--format=csv" in line for line in title.splitlines()
    )
