"""Real Prometheus-compatible servers for tests: Prometheus (Debian's ``prometheus``), which scrapes targets on
127.0.0.1 or serves readings backfilled into its data directory by ``promtool``, and VictoriaMetrics (Debian's
``victoria-metrics``), which takes readings through its import API; both answer PromQL on the Prometheus HTTP API.
:func:`tsdb_holding` starts either kind holding given readings."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.environment import debian_binary
from tests.support.servers import free_port

TSDB_KINDS = ("victoria-metrics", "prometheus")
"""The TSDBs :func:`tsdb_holding` starts."""
TsdbLoader = Callable[[Iterable[str]], str]
"""Starts a TSDB holding the readings given (Prometheus text exposition lines), returns its base URL."""


@contextmanager
def prometheus(
    binary: Path,
    workdir: Path,
    jobs: Mapping[str, list[str]] | None = None,
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
    bearer: Mapping[str, str] | None = None,
    flags: Sequence[str] = (),
) -> Iterator[str]:
    """Run Prometheus on the data directory ``workdir``/data (kept 100 years: blocks backfilled there by
    :func:`backfill_openmetrics` stay), scraping each job's targets (``host:port``) every ``interval`` and evaluating
    ``rule_files``; yields its base URL once ``/-/ready`` answers. ``bearer``: job → the token its scrapes send (the
    ``authorization`` scrape option); ``flags``: more command-line flags."""
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            | ({"authorization": {"credentials": bearer[job]}} if bearer and job in bearer else {})
            for job, targets in (jobs or {}).items()
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with _server(
        [str(binary), f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
         *flags],
        f"http://127.0.0.1:{port}", "/-/ready", workdir / "prometheus.log",
    ) as url:  # fmt: skip
        yield url


@contextmanager
def victoria_metrics(binary: Path, workdir: Path) -> Iterator[str]:
    """Run single-node VictoriaMetrics with its data in ``workdir`` on a free port of 127.0.0.1; yields its base
    URL once ``/health`` answers. Readings go in with :func:`import_prometheus`; nothing is scraped."""
    port = free_port()
    with _server(
        [str(binary), f"-storageDataPath={workdir / 'data'}", f"-httpListenAddr=127.0.0.1:{port}",
         "-loggerLevel=WARN", "-retentionPeriod=100y"],
        f"http://127.0.0.1:{port}", "/health", workdir / "victoria-metrics.log",
    ) as url:  # fmt: skip
        yield url


@contextmanager
def _server(command: list[str], url: str, ready_path: str, log: Path, timeout_seconds: float = 60) -> Iterator[str]:
    """Run ``command`` (its standard error to ``log``) until the block ends; yields ``url`` once ``ready_path``
    answers 200. Raises with the log's end when it does not within ``timeout_seconds`` or the process exits."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                if httpx.get(f"{url}{ready_path}").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{command[0]} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def import_prometheus(url: str, lines: Iterable[str]) -> None:
    """Send readings to VictoriaMetrics' ``/api/v1/import/prometheus`` (Prometheus text exposition lines with
    timestamps in milliseconds: ``name{labels} value ms``), then flush them so queries see them
    (``/internal/force_flush``; VictoriaMetrics' documentation, "How to import data in Prometheus exposition
    format")."""
    body = "".join(f"{line}\n" for line in lines).encode()
    httpx.post(f"{url}/api/v1/import/prometheus", content=body, timeout=120).raise_for_status()
    httpx.get(f"{url}/internal/force_flush", timeout=60).raise_for_status()


def backfill_openmetrics(promtool: Path, workdir: Path, lines: Iterable[str]) -> None:
    """Write readings (Prometheus text exposition lines with timestamps in milliseconds, as
    :func:`import_prometheus` takes them) into TSDB blocks in ``workdir``/data, for :func:`prometheus` to serve:
    ``promtool tsdb create-blocks-from openmetrics`` on an OpenMetrics file of them (Prometheus documentation,
    "Storage", "Backfilling from OpenMetrics format"): timestamps in seconds, each series' samples together and in
    time order, ``# EOF`` at the end (OpenMetrics specification, "Text format")."""
    series: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in lines:
        name, value, ms = line.rsplit(" ", 2)
        series[name].append((int(ms), value))
    text = "".join(
        f"{name} {value} {ms // 1000}.{ms % 1000:03d}\n"
        for name in sorted(series)
        for ms, value in sorted(series[name])
    )
    source = workdir / "readings.om"
    source.write_text(text + "# EOF\n")
    command = [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(workdir / "data")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")


@contextmanager
def tsdb_holding(kind: str, workdir: Path, lines: Iterable[str]) -> Iterator[str]:
    """A TSDB of ``kind`` (one of :data:`TSDB_KINDS`) holding the readings ``lines`` (Prometheus text exposition,
    timestamps in milliseconds), its data in ``workdir``; yields its base URL. VictoriaMetrics takes them through
    its import API (:func:`import_prometheus`), Prometheus by backfill before it starts
    (:func:`backfill_openmetrics`)."""
    if kind == "victoria-metrics":
        with victoria_metrics(debian_binary("victoria-metrics"), workdir) as url:
            import_prometheus(url, lines)
            yield url
    elif kind == "prometheus":
        backfill_openmetrics(debian_binary("promtool"), workdir, lines)
        with prometheus(debian_binary("prometheus"), workdir) as url:
            yield url
    else:
        raise ValueError(f"unknown TSDB {kind!r}: expected one of {', '.join(TSDB_KINDS)}")


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The instant-query result vector (``data.result``); raises on an API error."""
    response = httpx.get(f"{url}/api/v1/query", params={"query": promql})
    body = response.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{promql}: {body}")
    return list(body["data"]["result"])


def wait_for(url: str, promql: str, timeout_seconds: float = 30.0) -> list[dict[str, Any]]:
    """Poll ``promql`` until it returns data (the first scrapes take a moment); raises on timeout."""
    deadline = time.monotonic() + timeout_seconds
    while not (result := query(url, promql)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{promql} returned no data within {timeout_seconds} s")
        time.sleep(0.5)
    return result
