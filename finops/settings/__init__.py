"""Service settings, read from the environment (prefix ``FINOPS_``) by pydantic-settings.

The settings are grouped by subsystem, one class per group, in the modules of this package;
:class:`~finops.settings.combined.Settings` is all of them together and is what the service, the CLI and the
dashboard read. Code that needs one group may take that group's class.

- :mod:`finops.settings.server` — the service's own running: ``StorageSettings`` (database URL, data directory,
  raw-sample retention, requests' lock timeout), ``ApiSettings`` (bearer tokens of the ingest API and the REST
  API), ``TlsSettings`` (the certificate and private key `serve` speaks HTTPS with), ``IngestSettings`` (per-node
  ingest limits: readings per second, burst, GPUs per batch and per node; body deadline, memory budget of request
  bodies), ``SchedulerSettings`` (how often the scheduler rolls up the ledger, and how long its job leases last).
- :mod:`finops.settings.sources` — where data comes from: ``PricingSettings`` (default pricing model and the price
  catalog file), ``PrometheusPullSettings`` (pulling dcgm-exporter telemetry from a Prometheus),
  ``TelemetrySettings`` (where raw telemetry lives: the database, or a Prometheus-compatible TSDB),
  ``SacctSettings`` (the scheduled Slurm job import with sacct), ``CollectorSettings`` (what the service assumes of
  its collectors), ``DemoSettings`` (where the demo and the tests find real third-party traces).
- :mod:`finops.settings.analysis` — how GPU use is judged: ``IdleSettings`` (when an allocated GPU counts as idle,
  and for how long before it is an idle episode), ``WasteSettings`` (the thresholds and conventions of the waste
  reasons of idle GPUs), ``EfficiencySettings`` (SM activity bands, busy-but-inefficient jobs and their bottleneck
  rules).
- :mod:`finops.settings.alerts` — ``AlertSettings`` (alert rules file, Slack webhooks, SMTP, Alertmanagers,
  delivery), ``NudgeSettings`` (per-user messages about wasteful jobs: thresholds, schedule, users' addresses).
- :mod:`finops.settings.dashboard` — ``DashboardSettings`` (the dashboard's log-in with an OpenID Connect provider,
  and groups → roles).
- :mod:`finops.settings.group` — ``SettingsGroup``, what every group shares.

Every field is ``FINOPS_<NAME>`` in the environment, whichever group holds it. Secrets can also come from a
file: ``FINOPS_INGEST_TOKEN_FILE=/run/secrets/token`` reads the token from that file. Setting both the value and
the ``_FILE`` variant is an error. Secrets are never logged: they are :class:`pydantic.SecretStr`, shown as
``**********``. The Slack webhooks are a JSON object of name → URL
(``{"vision": "https://hooks.slack.com/services/…"}``), in the variable or in its file. The Alertmanagers alerts are
posted to are a JSON object of name → :class:`~finops.settings.alerts.AlertmanagerTarget` whose credentials are files.
"""
