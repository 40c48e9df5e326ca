# dra-extender image: `docker build -t dra-extender:0.1.0 .`
# Stage 1 builds wheels for the project and its dependencies; stage 2 installs
# them into a virtualenv on the same slim base, without a compiler or pip cache.
FROM python:3.12.8-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY allocator/ allocator/
COPY tracker/ tracker/
COPY serving/ serving/
COPY extender/ extender/
COPY controllers/ controllers/
COPY webhook/ webhook/
COPY dra_extender/ dra_extender/
COPY kubectl_dra/ kubectl_dra/
RUN pip install --no-compile . && python -m compileall -q /opt/venv

FROM python:3.12.8-slim-bookworm
LABEL org.opencontainers.image.title="dra-extender" \
      org.opencontainers.image.description="kube-scheduler extender for DRA device taints, tolerations and device attribute patches" \
      org.opencontainers.image.licenses="Apache-2.0"
# Nothing is written at run time except /tmp (an emptyDir in the chart), so the
# root filesystem can be read-only; no .pyc is written next to the code.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/venv /opt/venv
# The distroless "nonroot" uid, matching the chart's runAsUser.
USER 65532:65532
EXPOSE 8888 8889
ENTRYPOINT ["dra-extender"]
# Without arguments: its own Lease, so however many replicas run, one allocates (the chart passes --scheduler-config).
CMD ["serve", "--in-cluster", "--leader-elect"]
