"""GPU exporter sidecar: sources (NVML, fake, replay, simulated) behind one Prometheus Collector.

Importing this package imports nothing heavy; ``pynvml`` and ``psutil`` load only where used.
"""
