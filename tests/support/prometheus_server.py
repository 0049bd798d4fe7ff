"""Real Prometheus-compatible servers for tests: Prometheus (Debian's ``prometheus``), which scrapes targets on
127.0.0.1, and VictoriaMetrics (Debian's ``victoria-metrics``), which takes readings through its import API; both
answer PromQL on the Prometheus HTTP API."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.servers import free_port


@contextmanager
def prometheus(
    binary: Path,
    workdir: Path,
    jobs: dict[str, list[str]],
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
    bearer: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Run Prometheus scraping each job's targets (``host:port``) every ``interval`` and evaluating
    ``rule_files``; yields its base URL. ``bearer``: job → the token its scrapes send (the ``authorization``
    scrape option)."""
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            | ({"authorization": {"credentials": bearer[job]}} if bearer and job in bearer else {})
            for job, targets in jobs.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with _server(
        [str(binary), f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
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
