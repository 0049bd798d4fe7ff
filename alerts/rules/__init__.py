"""The alert rules: what is true in the data right now, as candidate alerts.

Each rule function reads the database (or the events taken from :mod:`finops.analysis.events`) and returns the alerts
whose condition holds at ``now``; :func:`alerts.engine.evaluate` turns them into stored alert instances (new,
still firing, or resolved when a rule stops returning them). A module per rule or family of rules, in the order
below (:mod:`alerts.rules.spend`, :mod:`alerts.rules.idle`, :mod:`alerts.rules.throttling`,
:mod:`alerts.rules.silence`, :mod:`alerts.rules.data_quality`), each returning
:class:`alerts.rules.candidate.Candidate` alerts:

- ``budget-50`` / ``budget-80`` / ``budget-100`` / ``budget-forecast`` / ``spend-anomaly``: one alert per event;
  a budget alert lasts until its month ends, an anomaly until the end of the day after the anomalous day.
- ``idle-gpu``: idle episodes (:mod:`finops.analysis.idle`, already at least the idle window long) still open at ``now``
  (their end within the idle max gap of ``now``), one alert per job with its GPUs, cost so far, owner and probable
  waste reason with its evidence (:mod:`finops.analysis.waste`; that of its open episodes with the most GPU-time)
  (an episode on a GPU whose model has no price is said unpriced, with the fix, never counted as 0).
- ``throttling``: an allocated GPU whose readings show a thermal (``sw_thermal``, ``hw_thermal``,
  ``hw_slowdown``) or power (``sw_power_cap``, ``hw_power_brake``) clocks-event reason on every reading from
  the first throttled reading after its newest unthrottled one to its newest reading, at least ``for`` apart,
  the newest reading younger than the collector-silent threshold (NVML ``nvmlClocksEventReason*`` bits,
  :data:`collector.contract.clocks_events.CLOCKS_EVENT_REASONS`).
- ``collector-silent``: a node that has reported (its GPUs have UUIDs) with no reading for ``intervals`` ×
  the collector interval; ``gpu-lost``: a GPU with no reading for as long while its node still reports.
- ``data-quality``: over the last ``period``, the share of GPU time that ran jobs the service does not know above
  ``max_unknown_job_share`` (a job import or job id problem: :func:`finops.analysis.quality.unattributed_causes`),
  or the share with no reading at all above ``max_no_reading_share`` (silent or missing collectors, by node:
  :func:`finops.analysis.quality.without_readings`), each with its fix; idle capacity (no job on the GPU) is
  normal, said in the message, and never fires it.

Names (teams, users, jobs, nodes) are shown exactly as stored: never re-cased.
"""
