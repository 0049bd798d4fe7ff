"""A node whose clock is an hour fast, with real processes: ``gpu-finops serve`` and a collector process
(:mod:`tests.support.skewed_node`) stamping 8 GPUs' readings an hour ahead. Every reading is refused with the reason
(``future``, how far ahead, "check the node's clock"), nothing of them is stored, the collector's ``/metrics`` counts
them in ``gpufinops_collector_untimely_samples_total{reason="future"}`` and logs it, and the data quality page lists
the node with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import streamlit as st
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.quality import untimely_by_node
from finops.db.models import GpuSample
from finops.ingest.node_tokens import create_token
from finops.timeutil import utc_now
from tests.dashboards.apptest import run_page
from tests.support.servers import free_port, serve_process

NODE = "gpu-skew-01"
HOUR = 3600
WAIT_SECONDS = 60


def _untimely(metrics_url: str) -> dict[str, float]:
    """``gpufinops_collector_untimely_samples_total`` by reason, from the collector's ``/metrics``."""
    text = httpx.get(metrics_url, timeout=10).text
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gpufinops_collector_untimely_samples_total"
    }


def test_a_node_an_hour_fast_is_refused_counted_and_shown(
    database_url: str,
    sessions: sessionmaker[Session],
    shared_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with sessions.begin() as session:
        token = create_token(session, NODE, utc_now(), actor="system:test")[1]
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url}
    metrics_port = free_port()
    log = tmp_path / "collector.log"
    with serve_process(env) as url:
        options = {"service_url": url, "token": token, "node": NODE, "spool_dir": str(tmp_path / "spool"),
                   "metrics_port": metrics_port, "offset_seconds": HOUR}  # fmt: skip
        with log.open("wb") as output:
            collector = subprocess.Popen(
                [sys.executable, "-m", "tests.support.skewed_node", json.dumps(options)],
                env=env, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            while True:
                assert collector.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"no refusal counted within {WAIT_SECONDS} s: {log.read_text()}"
                try:
                    counted = _untimely(metrics_url)
                except httpx.TransportError:
                    counted = {}
                if counted.get("future", 0) >= 16:  # two cycles of 8 GPUs
                    break
                time.sleep(0.1)
        finally:
            collector.terminate()
            collector.wait(timeout=30)
    assert counted.get("too_old") == 0
    assert "readings for their time" in log.read_text() and "check NTP/chrony" in log.read_text()
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0, "nothing an hour ahead is stored"
        (found,) = untimely_by_node(session, utc_now() - timedelta(hours=1))
    assert (found.node, found.reason) == (NODE, "future")
    assert found.readings >= counted["future"]
    assert "in the future by the service's clock" in found.last_error and "check the node's clock" in found.last_error
    ahead = int(found.last_error.split(" s in the future")[0].rsplit(" ", 1)[-1])
    assert HOUR - 60 <= ahead <= HOUR + 60, found.last_error

    monkeypatch.setenv("FINOPS_DATABASE_URL", database_url)
    monkeypatch.delenv("FINOPS_PROMETHEUS_URL", raising=False)
    st.cache_data.clear()
    page = run_page("views/quality.py", period="7d")
    shown = page.dataframe[0].value
    assert shown["node"].tolist() == [NODE] and shown["refused as"].tolist() == ["future"]
    assert shown["readings refused"].iloc[0] == found.readings
    assert any("clock is ahead" in warning.value for warning in page.warning)
