# Switchboard container image (docs/self-hosting.md, "Container image").
# Two stages: the build stage installs the locked dependencies (requirements.lock, every file checked
# against its hash: the same locked install CI makes) and Switchboard into a venv; the final stage copies
# only that venv onto a slim Python and runs it as an unprivileged user.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
WORKDIR /src
RUN python -m venv /opt/switchboard
COPY requirements.lock ./
RUN /opt/switchboard/bin/pip install --require-hashes -r requirements.lock
COPY pyproject.toml ./
COPY src ./src
RUN /opt/switchboard/bin/pip install --no-deps .

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 switchboard \
    && useradd --system --uid 10001 --gid switchboard --no-create-home \
       --home-dir /var/lib/switchboard --shell /usr/sbin/nologin switchboard \
    && install -d -m 0700 -o switchboard -g switchboard /var/lib/switchboard
COPY --from=build /opt/switchboard /opt/switchboard
ENV PATH=/opt/switchboard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SWITCHBOARD_DATA=/var/lib/switchboard \
    SWITCHBOARD_LISTEN=0.0.0.0:8080
USER 10001:10001
WORKDIR /var/lib/switchboard
VOLUME ["/var/lib/switchboard"]
EXPOSE 8080
# Liveness: the process answers HTTP. Readiness (/readyz) is for the proxy and compose's depends_on.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["switchboard"]
CMD ["serve"]
