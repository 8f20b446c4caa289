# huiyi gateway image. Built and run with docker compose (see docker-compose.yml).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HUIYI_DATA_DIR=/data HUIYI_HOST=0.0.0.0 HUIYI_PORT=8080
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY bridges bridges
COPY memory memory
COPY locales locales
RUN pip install --no-cache-dir .
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
CMD ["huiyi", "serve"]
