"""Post-run report: run dir -> stage table -> verdict, knee, alerts -> markdown, HTML, CSV, JSON."""
