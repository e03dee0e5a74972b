"""The InfluxDB store (docs/telemetry.md): a RunWriter mirror of the file store.

settings.py   `[store] influx` in config.toml and where its credential comes from
points.py     the schema: what each store record and trial table becomes in line protocol
spool.py      the run's append-only spool (influx/*.lp) and how far each file is shipped
targets.py    the two wire APIs (1.x /write + InfluxQL, 2.x/3.x /api/v2/write + Flux), TARGETS
shipper.py    ships the spool in batches, replays after outages, sets rejected points aside
mirror.py     InfluxMirror, the RunWriter handed to the file store, feeding worker.py; preflight
worker.py     the process (niced) that spools a run's events and ships the spool
backfill.py   the points of a stored run directory (`longhaul export`)
readback.py   a run directory rebuilt from InfluxDB (`longhaul report --from-influx`)
"""
