"""A real Prometheus server (Debian's ``prometheus``) for tests: scrapes targets on 127.0.0.1, answers PromQL."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
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
    process = subprocess.Popen(
        [str(binary), f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(workdir / "prometheus.log").open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/-/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"Prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


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
