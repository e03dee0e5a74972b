"""Studies: analyses of stored runs beyond the core report, one package per study (its analysis,
the paper's reference values, its report section and template); registry.py lists their sections."""
