"""The web kind: request traces (single file, Zipf, workload classes, World Cup, several sites)
replayed by Locust or wrk through the proxy -> web stack (000 §5, 004 §4-7); with dynamic
requests in the traces, also through the application and database tiers behind the web tier
(compose/app-db.yml, 004 §7.1; their figures and the write check come from ``appdb``).

Factors: trace x mode x users x docroot, repetitions. A point needs the stack up with the
experiment's server options, the mode's server options and the point's docroot; the engine
replays the trace for warm-up + measured time while the runner samples every second, and the
summary's numbers all come from the samples that bracket the measured window.

The package: ``settings`` (the experiment's keys), ``kind`` (the contract), ``plan`` (the
plan's lines), ``sizes`` (what a run writes where), ``prepare`` (the run's trace files),
``stack`` (the stack brought up and its tiers), ``sequence`` (one point) with its optional
``steps``, ``engines`` (``load``, ``locust``, ``wrk``), ``webmetrics`` (the figures),
``appdb`` (the application and database tiers), ``webdisks`` (disk systems under the docroot),
``results`` (summary columns and progress lines) and ``report`` (the report section).
"""
