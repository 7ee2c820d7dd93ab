# locust-llm: one image for the Locust master and workers, the simulated server (target) and the
# GPU exporter sidecar. Build: docker build -t locust-llm .   (docs/cluster.md)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# dependencies first (cached while only the source changes)
COPY pyproject.toml README.md ./
COPY locust_llm ./locust_llm
# gcc builds the kernel transport's C read (optional: pip goes on without it) and is removed in
# the same layer
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 locust \
    && mkdir -p /app/reports \
    && chown locust /app/reports

COPY locustfiles ./locustfiles

USER locust
# 8089 Locust web UI (+ /llm/stats, /llm/metrics), 5557 master <- workers,
# 8000 simulated server, 9400 GPU exporter
EXPOSE 8089 5557 8000 9400
VOLUME ["/app/reports"]
CMD ["locust-llm", "--help"]
