"""The scenario slice (:mod:`tests.support.scenario`) with GPU 1 of a model the packaged catalog has no price for.

GPU 0 (H100, priced) keeps the scenario's hand-computed costs: alpha r (hour 1) + r/2 (hour 2), ``__unallocated__``
r/2; total 2 r. GPU 1 (``UNPRICED_MODEL``) keeps its 2 GPU-hours in the ledger unpriced: 0.5 h ``__unallocated__``
and 1.5 h of job 502 (``__unmapped__``) at 50 %, with its energy. :func:`catalog_with_model` is the packaged catalog
plus a price for that model, as an operator would import it.

With ``unpriced_gpu="0"`` it is GPU 0 instead that has no price: then the slice's one idle episode (job 501, alpha,
GPU 0 over [T+60 min, T+90 min)) lies on the unpriced GPU. With ``model`` the GPU is of that model instead (an
``AMD Instinct MI250X``, whose on-demand price the packaged catalog marks an estimate).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops.pricing.catalog import DEFAULT_CATALOG, Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch
from tests.support import scenario

UNPRICED_MODEL = "ACME Z9 64GB"
ADDED_RATE = "2.50"


def samples(t0: datetime, unpriced_gpu: str = "1", model: str = UNPRICED_MODEL) -> list[Sample]:
    """The scenario's readings with GPU ``unpriced_gpu``'s model replaced by ``model``."""
    return [
        replace(sample, labels={**sample.labels, "model": model}) if sample.labels["gpu"] == unpriced_gpu else sample
        for sample in scenario.samples(t0)
    ]


def batch(t0: datetime, unpriced_gpu: str = "1", model: str = UNPRICED_MODEL) -> IngestBatch:
    """All readings as one ingest batch from ``scenario.NODE``."""
    readings = samples(t0, unpriced_gpu, model)
    return IngestBatch.model_validate(
        {
            "node": scenario.NODE,
            "gpus": [gpu_info_dict(s) for s in readings[:2]],
            "samples": [reading_dict(s) for s in readings],
        }
    )


def load(session, t0: datetime, unpriced_gpu: str = "1", model: str = UNPRICED_MODEL) -> None:  # type: ignore[no-untyped-def]
    """Readings and jobs of the slice, with alpha's account mapped; no rollup."""
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account

    map_account(session, "acct-a", "alpha", actor="system:test")
    Ingestor().store(session, batch(t0, unpriced_gpu, model))
    result = import_sacct(session, scenario.sacct_lines(t0), source="scenario")
    assert (result.jobs, result.errors) == (2, [])


def load_rolled_up(session, t0: datetime, unpriced_gpu: str = "1", model: str = UNPRICED_MODEL) -> Pricing:  # type: ignore[no-untyped-def]
    """:func:`load`, then the ledger rolled up through the slice's two hours at on-demand prices of the packaged
    catalog; that pricing."""
    from finops.ledger.rollup import rollup

    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    load(session, t0, unpriced_gpu, model)
    rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return pricing


def catalog_with_model() -> str:
    """The packaged catalog's YAML with a model matching :data:`UNPRICED_MODEL` (on-demand, from 2020)."""
    return DEFAULT_CATALOG.read_text() + (
        "  ACME-Z9:\n"
        "    description: A GPU the packaged catalog does not price (tests).\n"
        "    match: ['\\bACME Z9\\b']\n"
        "    prices:\n"
        "      - pricing_model: on-demand\n"
        "        effective_from: 2020-01-01\n"
        f"        rate: {ADDED_RATE}\n"
        "        sources:\n"
        "          - url: https://example.com/acme-z9\n"
        "            note: A made-up price for the tests.\n"
    )
