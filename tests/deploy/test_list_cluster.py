"""deploy/kubernetes/list_cluster.py, the pods-import CronJob's lister, against a stand-in API server: it follows
the continue tokens to one listing of every page, sends the service account's token, writes the lists
`gpu-finops import pods` reads (the fixture's pods and nodes, as kubectl printed them), and on an API error writes
nothing and exits 1 with the API's message."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from finops.jobs.kubernetes import parse_nodes, parse_pods
from tests.support.environment import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "kubernetes" / "list_cluster.py"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "kubernetes"
TOKEN = "service-account-token"
PAGE = 3


class StandInApiServer(ThreadingHTTPServer):
    lists: dict[str, list[Any]]
    requests: list[tuple[str, dict[str, list[str]], str]]
    expire_continue: bool = False


class Handler(BaseHTTPRequestHandler):
    server: StandInApiServer

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        self.server.requests.append((url.path, query, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(401, {"kind": "Status", "message": "Unauthorized"})
        start = int(query.get("continue", ["0"])[0])
        if start and self.server.expire_continue:
            message = "The provided continue parameter is too old to display a consistent list result."
            return self._answer(410, {"kind": "Status", "code": 410, "reason": "Expired", "message": message})
        items = self.server.lists[url.path]
        metadata = {"resourceVersion": "4711"}
        if start + PAGE < len(items):
            metadata["continue"] = str(start + PAGE)
        kind = "PodList" if url.path.endswith("pods") else "NodeList"
        self._answer(
            200, {"kind": kind, "apiVersion": "v1", "metadata": metadata, "items": items[start : start + PAGE]}
        )

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def fixture(name: str) -> list[Any]:
    items: list[Any] = json.loads((FIXTURES / name).read_text())["items"]
    return items


@pytest.fixture
def api() -> Iterator[StandInApiServer]:
    server = StandInApiServer(("127.0.0.1", 0), Handler)
    server.lists = {"/api/v1/pods": fixture("pods.json"), "/api/v1/nodes": fixture("nodes.json")}
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def list_cluster(api: StandInApiServer, directory: Path, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    token_file = directory.parent / "token"
    token_file.write_text(token + "\n")
    server = f"http://127.0.0.1:{api.server_address[1]}"
    command = [sys.executable, str(SCRIPT), str(directory), "--server", server, "--token-file", str(token_file)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_every_page_in_one_listing_the_import_reads(api: StandInApiServer, tmp_path: Path) -> None:
    directory = tmp_path / "listing"
    directory.mkdir()
    done = list_cluster(api, directory)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pods.json: 8 pods", "nodes.json: 3 nodes"]
    pods, nodes = (json.loads((directory / name).read_text()) for name in ("pods.json", "nodes.json"))
    assert pods["kind"] == "PodList" and pods["items"] == fixture("pods.json")
    assert nodes["kind"] == "NodeList" and nodes["items"] == fixture("nodes.json")
    assert sorted(path.name for path in directory.iterdir()) == ["nodes.json", "pods.json"]
    expected = parse_pods(json.loads((FIXTURES / "pods.json").read_text()), source="listing")
    assert parse_pods(pods, source="listing") == expected
    assert parse_nodes(nodes, source="listing") == parse_nodes(
        json.loads((FIXTURES / "nodes.json").read_text()), source="kubectl"
    )
    pod_requests = [(query, auth) for path, query, auth in api.requests if path == "/api/v1/pods"]
    assert len(pod_requests) == 3  # 8 pods, 3 a page
    assert all(query["limit"] == ["500"] and auth == f"Bearer {TOKEN}" for query, auth in pod_requests)
    assert [query.get("continue") for query, _ in pod_requests] == [None, ["3"], ["6"]]


def test_an_api_error_writes_nothing(api: StandInApiServer, tmp_path: Path) -> None:
    directory = tmp_path / "listing"
    directory.mkdir()
    api.expire_continue = True
    done = list_cluster(api, directory)
    assert done.returncode == 1
    assert done.stderr.startswith("error: GET /api/v1/pods: HTTP 410: The provided continue parameter is too old")
    assert list(directory.iterdir()) == []
    api.expire_continue = False
    refused = list_cluster(api, directory, token="not-the-token")
    assert (refused.returncode, refused.stderr) == (1, "error: GET /api/v1/pods: HTTP 401: Unauthorized\n")
    assert list(directory.iterdir()) == []
