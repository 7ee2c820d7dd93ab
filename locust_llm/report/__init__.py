"""Post-run report: run dir -> stage tables -> verdict, knee, alerts -> markdown / HTML / CSV / JSON."""
