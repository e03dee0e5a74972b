"""Facility planning (seed 003): on-demand and best-effort transfers from a facility's own logs,
simulated (Listing 1 at a 1 s interval) and replayed in the lab; docs/planning.md."""
