# One image for every truerun service; the command picks the service:
#   docker run IMAGE coordinator | capacity | reconciler | gateway | migrate | --help
# Settings come from TRUERUN_* variables, TRUERUN_CONFIG_FILE and *_FILE secrets
# (docs/operations.md). Build: docker build -t truerun .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Builder: turn the sources into a wheel and install it with its pinned dependencies into a
# virtualenv. Every dependency ships manylinux wheels, so no compiler is needed even here.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protos/gen protos/gen
COPY kernel kernel
COPY services services
COPY coordinator coordinator
COPY capacity capacity
COPY automations automations
COPY longtasks longtasks
COPY reconciler reconciler
COPY gateway gateway
COPY truerun_runtime truerun_runtime
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/truerun \
    && /opt/truerun/bin/pip install /wheels/truerun-*.whl \
    && /opt/truerun/bin/pip uninstall --yes pip setuptools \
    && /opt/truerun/bin/truerun --help

# Final: the slim base plus the virtualenv only; no pip, no sources, no build tools.
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 truerun \
    && useradd --system --uid 10001 --gid truerun --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin truerun \
    && mkdir -p /var/lib/truerun \
    && chown truerun:truerun /var/lib/truerun
COPY --from=builder /opt/truerun /opt/truerun
# Inside a container the services listen on every interface; the chart sets these too.
ENV PATH=/opt/truerun/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TRUERUN_DATA_DIR=/var/lib/truerun \
    TRUERUN_GRPC_ADDR=0.0.0.0:7233 \
    TRUERUN_HTTP_ADDR=0.0.0.0:8080 \
    TRUERUN_METRICS_ADDR=0.0.0.0:9464
WORKDIR /var/lib/truerun
USER 10001:10001
# 7233 gRPC (coordinator, capacity, reconciler health), 8080 gateway HTTP, 9464 metrics
EXPOSE 7233 8080 9464
ENTRYPOINT ["truerun"]
CMD ["--help"]
