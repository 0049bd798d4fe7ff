"""``PUT /api/v1/prices`` parses and stores a catalogue in a worker thread, over a real socket on both databases:
while a catalogue of the most models a catalogue may have is being parsed (held there until the test has seen the
rest answered, at most :data:`WAIT`), ``/healthz`` and an ingest batch are answered; then the catalogue is stored."""

from __future__ import annotations

import threading

import httpx
import orjson

from finops.pricing import store
from finops.pricing.catalog import PriceCatalog
from finops.pricing.catalog_yaml import MAX_MODELS
from finops.web.app import create_app
from tests.support.catalogues import catalogue
from tests.support.servers import API_TOKEN, running

TOKEN = "off-the-loop-ingest-token"
NOW = 1795244400  # the service's clock: 2026-11-21T07:00Z
WAIT = 30.0
GPU = {"uuid": "GPU-1", "index": 0, "model": "NVIDIA H100 80GB HBM3"}
SERIES = [{"uuid": "GPU-1", "ts": [NOW - 60], "utilization_ratio": [1]}]
BATCH = orjson.dumps({"node": "a", "gpus": [GPU], "series": SERIES})
INGEST = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_healthz_and_ingest_are_answered_while_a_catalogue_is_parsed(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parsing, answered = threading.Event(), threading.Event()
    parse = store.parse_catalog

    def held(text: str, source: str) -> PriceCatalog:
        parsing.set()
        answered.wait(WAIT)
        return parse(text, source)

    monkeypatch.setattr(store, "parse_catalog", held)
    app = create_app(sessions, TOKEN, api_token=API_TOKEN, clock=lambda: NOW)
    results: list[httpx.Response] = []
    with running(app) as url, httpx.Client(base_url=url, timeout=WAIT) as client:
        body = catalogue(MAX_MODELS).encode()
        headers = {"Authorization": f"Bearer {API_TOKEN}"}

        def send() -> None:
            results.append(client.put("/api/v1/prices", content=body, headers=headers))

        put = threading.Thread(target=send)
        put.start()
        try:
            assert parsing.wait(WAIT), "the catalogue was never parsed"
            # With the parse on the event loop, neither would be answered until it ends.
            assert httpx.get(f"{url}/healthz", timeout=WAIT / 3).status_code == 200
            stored = httpx.post(f"{url}/api/v1/ingest", content=BATCH, headers=INGEST, timeout=WAIT / 3)
            assert (stored.status_code, stored.json()) == (200, {"accepted": 1, "rejected": []})
            assert not results, "the catalogue was answered before the parse was let go"
        finally:
            answered.set()
            put.join(timeout=WAIT)
        assert results[0].status_code == 200, results[0].text
        prices = client.get("/api/v1/prices", headers=headers).json()
    assert len({row["model"] for row in prices["rows"]}) == MAX_MODELS
