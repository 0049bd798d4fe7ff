"""Exact hardware-activity means from DCGM 4.6's cycle counters, between two consecutive dcgm-exporter scrapes.

DCGM 4.6 (NVIDIA/DCGM ``dcgmlib/dcgm_fields.h``, field ids 1084-1096) exports raw monotonic counters: the SM cycles
elapsed (``DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL``) and, per pipe, the cycles it was active
(``DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL``, ``…_MMA_…``, ``…_FP64_…``; :data:`collector.contract.dcgm_fields.
CYCLE_COUNTERS`). Between two scrapes, Δ active cycles / Δ elapsed cycles is the mean activity over exactly that
interval, whatever DCGM's sampling window; a ratio field (``DCGM_FI_PROF_SM_UTIL_RATIO``) is DCGM's average over
its own last window only.

DCGM stores the counters as 64-bit integers; the Prometheus text parser reads them as doubles, exact up to 2^53 and
within one part in 10^12 of a ten-second difference well beyond that.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

from collector.contract.dcgm_fields import cycle_means

Key = TypeVar("Key", bound=Hashable)


class CycleMeans(Generic[Key]):
    """Keeps each entity's counters from the previous scrape and turns the next scrape's into means.

    An entity is a GPU or MIG instance, named by any hashable key (the dcgm source uses ``(gpu, UUID, GPU_I_ID)``).
    """

    def __init__(self) -> None:
        self._previous: dict[Key, Mapping[str, float]] = {}

    def update(self, scrape: Mapping[Key, Mapping[str, float]]) -> dict[Key, dict[str, float]]:
        """Means since the previous scrape: entity -> {activity metric: ratio 0..1}.

        ``scrape`` holds, per entity, this scrape's cycle counters (field name -> value). Each entity's means
        against its previous scrape are :func:`collector.contract.dcgm_fields.cycle_means`'s (none on an entity's
        first scrape, nor after a reset). This scrape's counters are the baseline of the next; entities absent from
        it are forgotten.
        """
        means: dict[Key, dict[str, float]] = {}
        for key, counters in scrape.items():
            previous = self._previous.get(key)
            if previous is not None:
                means[key] = cycle_means(previous, counters, key)
        self._previous = dict(scrape)
        return means
