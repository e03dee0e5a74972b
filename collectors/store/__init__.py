"""The run store: one directory per run (docs/results-format.md).

format.py names the format, its version and every file and column; records.py types its entries;
writer.py writes a run as it goes (RunWriter, FileRunWriter); reader.py loads one back
(load_store -> StoredRun), series.py its time series; upgrade.py lifts older versions on read;
provenance.py stamps where a run came from.
"""
