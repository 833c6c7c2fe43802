# Loopgate: slim Python base, non-root user, config mounted at /etc/loopgate/gateway.yaml.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# The otel extra: traces work wherever observability.otlp_endpoint is set (nothing is imported otherwise).
RUN pip install --no-cache-dir --prefix=/install ".[otel]"

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 loopgate
COPY --from=build /install /usr/local
ENV LOOPGATE_CONFIG=/etc/loopgate/gateway.yaml \
    PYTHONUNBUFFERED=1
USER loopgate
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["loopgate", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
