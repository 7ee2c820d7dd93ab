"""Benchmark-only adapters: run a load-test client against a URL, return its per-request timings.

Each adapter (``ours``, ``guidellm``, ``evalscope``, ``aiperf``) starts its client as a
subprocess, reads the client's own per-request output and converts it to locust-llm's metric
definitions (docs/metrics.md). ``truth`` matches those timings to the simulator's ``--trace``
and summarizes the errors; ``simproc`` starts and stops the simulator. Nothing here is imported
by the package or by Locust.
"""
