"""A real Alertmanager (Debian's ``prometheus-alertmanager``) for tests: one instance on 127.0.0.1, no cluster,
its one receiver a webhook (with resolved notifications) or nothing."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.servers import free_port


@contextmanager
def alertmanager(binary: Path, workdir: Path, webhook_url: str | None = None) -> Iterator[str]:
    """Run Alertmanager grouping by ``alertname`` and ``node`` with 1 s ``group_wait`` and ``group_interval``,
    notifying ``webhook_url`` (``send_resolved``) if given; yields its base URL once ``/-/ready`` answers (60 s at
    most, else RuntimeError with the end of its log)."""
    receiver: dict[str, Any] = {"name": "site"}
    if webhook_url is not None:
        receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
    config = {
        "route": {
            "receiver": "site",
            "group_by": ["alertname", "node"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [receiver],
    }
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = workdir / "alertmanager.log"
    process = subprocess.Popen(
        [str(binary), f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"),
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
                raise RuntimeError(f"Alertmanager did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def listed(url: str, *matchers: str) -> list[dict[str, Any]]:
    """``GET /api/v2/alerts`` with ``filter`` matchers (``node="gpu-a-01"``): the alerts Alertmanager holds
    (active, silenced or inhibited; not resolved ones)."""
    response = httpx.get(f"{url}/api/v2/alerts", params=[("filter", m) for m in matchers])
    response.raise_for_status()
    return list(response.json())


def wait_until(check: Callable[[], Any], what: str, timeout_seconds: float = 30.0) -> Any:
    """Poll ``check`` until it returns something true, and return that; TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_seconds
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_seconds} s")
        time.sleep(0.2)
    return found
