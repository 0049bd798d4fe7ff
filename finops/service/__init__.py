"""Long-running work beside the HTTP service: the APScheduler jobs (rollup, idle judging, events, alerts,
sacct and Prometheus pulls, partition upkeep), the cost series on ``/metrics`` and the dashboard process."""
