"""The appliance's web console (`longhaul serve`, docs/console.md): server-rendered pages over the
run store, read through the store's reader; it keeps no copy of results."""
