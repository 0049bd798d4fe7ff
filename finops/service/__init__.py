"""The service's processes around its web app: the HTTP server that runs it (uvicorn, its shutdown), the
APScheduler jobs (rollup, idle judging, events, alerts, sacct and Prometheus pulls, partition upkeep), the cost
series on ``/metrics`` and the dashboard process."""
