"""A seeded, SYNTHETIC stand-in for the Helios week, used when the real trace is not available.

Shape: six teams with the quotas of the six Helios "Earth" VCs the demo replays (56, 208, 96, 64, 64 and
24 GPUs: 64 nodes × 8) and their mean allocation in that week (0.96, 0.90, 0.70, 0.62, 0.33, 0.01, from
the trace's summary). Each team's allocation changes by a job-sized step (1-16 GPUs, powers of two as
GPU jobs mostly are in Helios) about once every 25 minutes, pulled towards a target that follows a day
cycle of ±15 % around the mean. Nothing here is measured data.
"""

from __future__ import annotations

import math
import random

from finops.demo.allocation import TeamSeries

SYNTHETIC_TEAMS: tuple[tuple[str, int, float], ...] = (
    ("llm-pretrain", 56, 0.96),
    ("vision", 208, 0.90),
    ("speech", 96, 0.70),
    ("recsys", 64, 0.62),
    ("research", 64, 0.33),
    ("sandbox", 24, 0.01),
)
STEP_SIZES = (1, 2, 4, 8, 8, 16)
CHANGE_PROBABILITY = 0.04
MINUTES_PER_DAY = 1440


def synthetic_week(seed: int = 7, minutes: int = 7 * MINUTES_PER_DAY) -> list[TeamSeries]:
    """Six teams' per-minute GPU allocation for ``minutes`` minutes; the same seed gives the same week."""
    rng = random.Random(seed)
    series = []
    for team, quota, mean in SYNTHETIC_TEAMS:
        level = round(mean * quota)
        running = []
        for minute in range(minutes):
            target = mean * quota * (1 + 0.15 * math.sin(2 * math.pi * minute / MINUTES_PER_DAY))
            if rng.random() < CHANGE_PROBABILITY:
                step = rng.choice(STEP_SIZES)
                grow = rng.random() < 0.5 + (target - level) / (2 * quota) * 4
                level = min(quota, level + step) if grow else max(0, level - step)
            running.append(level)
        series.append(TeamSeries(team, quota, running))
    return series
