"""The collector's whole ``/metrics`` on the fixture node: golden file, docs/metrics.md, promtool, real Prometheus."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from prometheus_client import generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from collector.contract import metric_names as m
from collector.exposition import CLOCKS_EVENT_ACTIVE, GPU_JOB_INFO
from tests.support.environment import REPO_ROOT, debian_binary
from tests.support.node_fixture import fixture_node_registry
from tests.support.prometheus_server import prometheus, wait_for
from tests.support.servers import free_port

GOLDEN = Path(__file__).parents[1] / "golden" / "fixture_node.prom"
DOCS = REPO_ROOT / "docs" / "metrics.md"


def _normalised(text: str) -> str:
    """The exposition with the wall-clock durations replaced, so the text is reproducible."""
    return re.sub(r"(gpufinops_collector_source_duration_seconds\{[^}]*\}) \S+", r"\1 <duration>", text)


def _documented() -> dict[str, list[str]]:
    """docs/metrics.md's tables: metric name -> label names."""
    rows = re.findall(r"^\| `(gpufinops_\w+)` \|[^|]*\|[^|]*\|([^|]*)\|", DOCS.read_text(), re.MULTILINE)
    return {name: [label.strip() for label in labels.split(",") if label.strip()] for name, labels in rows}


def test_whole_metrics_page_matches_the_golden_file(tmp_path: Path) -> None:
    text = _normalised(generate_latest(fixture_node_registry(tmp_path)).decode())
    if os.environ.get("FINOPS_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_every_metric_is_documented_with_its_labels(tmp_path: Path) -> None:
    documented = _documented()
    exposed_names = {m.SPECS[name].name for name in m.SPECS}
    assert exposed_names <= set(documented), f"undocumented: {sorted(exposed_names - set(documented))}"
    seen = set()
    for family in text_string_to_metric_families(generate_latest(fixture_node_registry(tmp_path)).decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in documented, f"{name} is exposed but not in docs/metrics.md"
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(documented[name]), f"{name}: labels differ from docs/metrics.md"
        seen.add(name)
    assert {CLOCKS_EVENT_ACTIVE, GPU_JOB_INFO, m.INFINIBAND_RECEIVED_BYTES, m.NFS_OPERATIONS} <= seen
    assert set(documented) - exposed_names - seen == set(), "docs/metrics.md lists metrics nothing exposes"


def test_promtool_check_metrics_is_clean(tmp_path: Path) -> None:
    promtool = debian_binary("promtool")
    text = generate_latest(fixture_node_registry(tmp_path)).decode()
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_a_real_prometheus_scrapes_the_fixture_values(tmp_path: Path) -> None:
    binary = debian_binary("prometheus")
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=fixture_node_registry(tmp_path))
    try:
        with prometheus(binary, tmp_path, {"fixture": [f"127.0.0.1:{port}"]}) as url:
            power = wait_for(url, 'gpufinops_gpu_power_watts{gpu="1"}')
            assert float(power[0]["value"][1]) == 70.25
            received = wait_for(url, 'gpufinops_infiniband_received_bytes_total{device="mlx5_0",port="1"}')
            assert float(received[0]["value"][1]) == 4 * 250_000_000, "port_rcv_data counts 4-byte words"
            throttled = wait_for(url, f'{CLOCKS_EVENT_ACTIVE}{{reason="sw_power_cap"}} == 1')
            assert [r["metric"]["gpu"] for r in throttled] == ["0"]
            job = wait_for(url, GPU_JOB_INFO)
            assert [(r["metric"]["gpu"], r["metric"]["job_id"]) for r in job] == [("0", "4242")]
    finally:
        server.shutdown()
        thread.join(timeout=10)
