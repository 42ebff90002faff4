# aap, the AAP 3.1 dealer agent, as a container image (docs/deployment.md, "Containers").
#
#   docker build -t aap .            (or: podman build / buildah bud)
#   docker run -p 8000:8000 aap      the demo dealer group, for a first look
#
# A deployment mounts its configuration and names it with AAP_CONFIG (compose.yaml does).
# The data directory /var/lib/aap is the working directory: a relative SQLite URL
# (sqlite:///aap.db) lands in it, so mount a volume there.

ARG PYTHON_VERSION=3.12

# -- build: the wheel, from the source tree ----------------------------------------------
FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# -- runtime: the wheel installed, run as an unprivileged user ------------------------------
FROM python:${PYTHON_VERSION}-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 aap \
 && useradd --system --uid 10001 --gid aap --home-dir /var/lib/aap --shell /usr/sbin/nologin aap \
 && mkdir -p /var/lib/aap /etc/aap \
 && chown aap:aap /var/lib/aap
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels
USER 10001:10001
WORKDIR /var/lib/aap
VOLUME ["/var/lib/aap"]
EXPOSE 8000
# /healthz answers 200 while the database answers (docs/deployment.md). The image has no
# curl: the check is Python's own HTTP client. AAP_HEALTH_URL moves it with --port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; url = os.environ.get('AAP_HEALTH_URL', 'http://127.0.0.1:8000/healthz'); sys.exit(0 if urllib.request.urlopen(url, timeout=4).status == 200 else 1)"]
ENTRYPOINT ["aap"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
