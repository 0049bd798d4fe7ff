"""The dashboard's two measures of idle GPU cost, named apart and explained where they are shown.

- **Unused allocated cost** (Overview, Teams, Jobs; the reports' ``idle_cost``): for every GPU-hour a job held, the
  part of its allocated cost that utilisation did not use, allocated cost × (1 − the mean utilisation of the
  hour's readings) (docs/cost-model.md). It counts partial use and short pauses; hours without readings count in
  neither used nor unused.
- **Idle-episode cost** (Idle GPUs; :mod:`finops.analysis.idle`): the whole capacity cost of each run of readings
  at or below the idle threshold that lasts at least the idle window on a GPU a job holds. A GPU in use above the
  threshold is never in an episode, and one below it for an hour counts its whole hour.

Neither is a part of the other, so the two figures differ, and each page says which one it shows.
"""

from __future__ import annotations

from dashboards.format import duration
from finops.settings.analysis import IdleSettings

UNUSED_COST = "Unused allocated cost"
EPISODE_COST = "Idle-episode cost"


def _percent(ratio: float) -> str:
    return f"{ratio * 100:g} %"


def _idle_rule(policy: IdleSettings) -> str:
    """``at or below 5 % utilisation for at least 30 minutes``, as configured (``FINOPS_IDLE_*``)."""
    return (
        f"at or below {_percent(policy.idle_threshold_ratio)} utilisation for at least "
        f"{duration(policy.idle_window_seconds)}"
    )


def unused_cost_caption(policy: IdleSettings) -> str:
    """What the unused allocated cost measures, with a pointer to the idle-episode cost (Markdown, one line)."""
    return (
        f"**{UNUSED_COST}**: for every GPU-hour a job held, allocated cost × (1 − the hour's mean utilisation), so "
        "a GPU at 40 % for an hour leaves 60 % of that hour's cost unused; partial use and short pauses count, and "
        "hours without readings count in neither used nor unused. "
        f"The Idle GPUs page shows another measure, the **{EPISODE_COST.lower()}**: the whole cost of only the "
        f"stretches a held GPU stayed {_idle_rule(policy)}."
    )


def episode_cost_caption(policy: IdleSettings) -> str:
    """What the idle-episode cost measures under the configured policy, with a pointer to the unused allocated
    cost (Markdown, one line)."""
    partitions = ", ".join(
        f"{name} {_percent(ratio)}" for name, ratio in sorted(policy.idle_partition_thresholds.items())
    )
    return (
        f"**{EPISODE_COST}**: the whole capacity cost of each stretch during which a GPU held by a job stayed "
        f"{_idle_rule(policy)} (readings at most {duration(policy.idle_max_gap_seconds)} apart; the first "
        f"{duration(policy.idle_grace_seconds)} of a job are not judged"
        + (f"; partition thresholds: {partitions}" if partitions else "")
        + "). A GPU in use above the threshold is never in an episode, and one below it counts its whole cost, "
        "not the share it left unused. "
        f"The Overview's **{UNUSED_COST.lower()}** is another measure: allocated cost × (1 − utilisation) over "
        "every GPU-hour a job held, partial use and short pauses included."
    )
