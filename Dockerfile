# Loopgate: slim Python base, non-root user, config at /etc/loopgate/gateway.yaml (the keyless default
# unless one is mounted there).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# The otel extra: traces work wherever observability.otlp_endpoint is set (nothing is imported otherwise).
RUN pip install --no-cache-dir --prefix=/install ".[otel]"

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 loopgate
COPY --from=build /install /usr/local
# The packaged keyless starting config (route `demo`: a mock model and demo tools, no key, no network):
# `docker run -p 8080:8080 loopgate` answers at once. Mount your own over it (compose, the chart do).
COPY gateway/config/starter.yaml /etc/loopgate/gateway.yaml
ENV LOOPGATE_CONFIG=/etc/loopgate/gateway.yaml \
    PYTHONUNBUFFERED=1
USER loopgate
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["loopgate", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
