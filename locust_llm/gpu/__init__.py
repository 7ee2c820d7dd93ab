"""GPU exporter sidecar: hardware sources (NVML, fake, replay, simulated) behind one Prometheus Collector."""
