"""Deployment files: compose parses (docker-compose when installed, else PyYAML), Dockerfiles COPY only
what exists and install the pinned CPU / CUDA torch, the KubeRay manifests have their head and GPU
workers (the several-node one: N whole machines, each able to hold one bundle of an nnodes=N run) and
use only KubeRay's field names.

Run: .venv/bin/python -m pytest tests/e2e/test_deploy_files.py -q
No container engine runs on these machines: this is everything checkable without building an image.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
REQUIRED_ENV = {"SECRET_KEY": "s" * 60, "ALLOWED_HOSTS": "studio.example.com", "POSTGRES_PASSWORD": "pw",
                "RLSTUDIO_PUBLIC_URL": "https://studio.example.com"}
APP_SERVICES = {"web", "worker", "worker-datasets", "worker-playground", "beat", "migrate", "ray-head",
                "ray-gpu-worker"}


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _resolved() -> dict:
    """The compose file as an engine sees it (anchors merged): docker-compose's own, else PyYAML's."""
    if shutil.which("docker-compose"):
        out = subprocess.run(["docker-compose", "-f", str(COMPOSE), "--profile", "gpu", "--profile", "tls",
                              "config"], env={**os.environ, **REQUIRED_ENV}, capture_output=True,
                             text=True, timeout=60, check=True)
        return yaml.safe_load(out.stdout)
    return _compose()  # PyYAML resolves << merges; ${...} stay unexpanded


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose not installed (apt: docker-compose)")
def test_docker_compose_config_accepts_it_and_refuses_missing_secrets():
    env = {**os.environ, **REQUIRED_ENV}
    ok = subprocess.run(["docker-compose", "-f", str(COMPOSE), "--profile", "gpu", "--profile", "tls",
                         "config", "-q"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    no_secret = {k: v for k, v in env.items() if k != "SECRET_KEY"}
    refused = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "-q"], env=no_secret,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "SECRET_KEY" in refused.stderr


def test_compose_services_volumes_and_env():
    spec = _resolved()
    services = spec["services"]
    assert {"postgres", "redis", "proxy"} | APP_SERVICES <= set(services)
    assert {"pgdata", "redisdata", "state"} <= set(spec["volumes"])
    for name in APP_SERVICES:
        svc = services[name]
        assert svc["build"]["target"] in {"web", "worker", "trainer"}, name
        assert svc["build"]["dockerfile"] == "docker/Dockerfile", name
        env = svc["environment"]
        # The variables rlstudio.config.env reads: the same everywhere, production settings.
        for var in ["DJANGO_SETTINGS_MODULE", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL",
                    "RAY_ADDRESS", "RLSTUDIO_STATE_DIR", "RLSTUDIO_PUBLIC_URL", "RLSTUDIO_BEHIND_TLS_PROXY"]:
            assert var in env, (name, var)
        assert env["DJANGO_SETTINGS_MODULE"] == "rlstudio.config.settings.production"
        assert env["RLSTUDIO_STATE_DIR"] == "/data"
        mounts = [v if isinstance(v, str) else f"{v['source']}:{v['target']}" for v in svc["volumes"]]
        assert any(m.split(":")[:2] == ["state", "/data"] for m in mounts), name  # one shared state: datasets, checkpoints, run folders
    assert services["web"]["build"]["target"] == "web"
    assert services["ray-head"]["build"]["target"] == "trainer"
    gpu = services["ray-gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    assert str(gpu["build"]["args"]["TORCH_VARIANT"]).startswith(("cu", "${TORCH_CUDA_VARIANT:-cu"))
    device = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    for name in ["postgres", "redis", "web", "ray-head"]:
        assert "healthcheck" in services[name], name
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_compose_points_the_app_at_the_ray_head_service_not_at_itself():
    """RAY_ADDRESS and RAY_DASHBOARD_URL (what /healthz probes, and the Jobs API when RAY_ADDRESS is not
    http) name the `ray-head` service's dashboard port: 127.0.0.1 inside `web` is `web` itself."""
    services = _resolved()["services"]
    head_port = "8265"
    assert f"--dashboard-port={head_port}" in services["ray-head"]["command"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        for var in ("RAY_ADDRESS", "RAY_DASHBOARD_URL"):
            value = env[var]
            if value.startswith("${"):  # PyYAML: the compose default, as docker-compose would render it
                value = value.split(":-", 1)[1].rstrip("}")
            assert value == f"http://ray-head:{head_port}", (name, var, value)


def _value(text: str) -> str:
    """A compose value as docker-compose renders it with the variable unset: `${VAR:-default}` -> default
    (PyYAML leaves the interpolation in place; docker-compose has already done it)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


def test_compose_gives_dataset_validations_and_playground_sessions_workers_of_their_own():
    """As `make run` does (launcher: celery-datasets, celery-playground): every app container routes the two
    tasks to the same named queues (the sender picks the queue), one worker consumes each with -Q, and the
    main worker consumes neither, so a validation or a session never holds up run submissions."""
    from rlstudio.launcher.cli import DATASETS_QUEUE, PLAYGROUND_QUEUE

    services = _resolved()["services"]
    queues = {"RLSTUDIO_DATASETS_QUEUE": ("worker-datasets", DATASETS_QUEUE),
              "RLSTUDIO_PLAYGROUND_QUEUE": ("worker-playground", PLAYGROUND_QUEUE)}
    for var, (worker, queue) in queues.items():
        for name in APP_SERVICES:
            assert _value(services[name]["environment"][var]) == queue, (name, var)
        argv = [_value(a) for a in services[worker]["command"]]
        assert argv[:4] == ["celery", "-A", "rlstudio.config.celery:app", "worker"], worker
        assert argv[argv.index("-Q") + 1] == queue, worker
        assert argv.count("-Q") == 1, worker
        assert services[worker]["build"]["target"] == "worker" and "healthcheck" in services[worker], worker
        assert services[worker]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    main = services["worker"]["command"]
    assert main[3] == "worker" and "-Q" not in main  # the default queue: runs, stops, the reconcile


def test_compose_playground_worker_has_a_process_per_admitted_session():
    """As make run's (launcher/workers.py): as many processes as the site admits sessions, one number for
    both (a session admitted beyond the worker's processes waits out its 120 s and is dropped)."""
    from rlstudio.config.env import PLAYGROUND_MAX_ACTIVE_DEFAULT

    services = _compose()["services"]  # as written: docker-compose's config would expand the ${...}
    raw = services["worker-playground"]["command"]
    assert "--concurrency=${RLSTUDIO_PLAYGROUND_MAX_ACTIVE:-4}" in raw and "--max-tasks-per-child=1" in raw
    for name in APP_SERVICES:
        assert services[name]["environment"]["RLSTUDIO_PLAYGROUND_MAX_ACTIVE"] == \
            "${RLSTUDIO_PLAYGROUND_MAX_ACTIVE:-4}", name
    assert _value("${RLSTUDIO_PLAYGROUND_MAX_ACTIVE:-4}") == str(PLAYGROUND_MAX_ACTIVE_DEFAULT)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthcheck_shells(port: int) -> dict[str, str]:
    """The web healthchecks as the container's shell runs them, aimed at `port`: compose's service
    (its `$$` is one `$`) and the web image's HEALTHCHECK (a continued line; PORT from the env)."""
    kind, command = _compose()["services"]["web"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    assert "http://127.0.0.1:8000/healthz" in command
    image = re.search(r"^HEALTHCHECK .*? CMD (.*?[^\\])$", _dockerfile().replace("\\\n", ""), flags=re.M).group(1)
    assert "http://127.0.0.1:${PORT}/healthz" in image
    return {"compose": command.replace("$$", "$").replace("127.0.0.1:8000", f"127.0.0.1:{port}"),
            "Dockerfile": image}


@pytest.mark.skipif(not shutil.which("curl"), reason="curl not installed (the web image has it)")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("allowed_hosts", ["studio.example.com,other.example.com", ".example.com"])
def test_the_web_healthcheck_passes_against_the_production_settings(settings, tmp_path, allowed_hosts):
    """`proxy` starts only once `web` is healthy (compose), and the image's own HEALTHCHECK says whether
    a `docker run` web is. The production settings answer a Host outside
    ALLOWED_HOSTS with 400, 127.0.0.1 included: a probe without the site's name never passed (shown
    below with the same curl, no Host). A real Daphne on the production settings and the test database."""
    db = settings.DATABASES["default"]
    port = _free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "rlstudio.config.settings.production",
           "SECRET_KEY": "k" * 60, "ALLOWED_HOSTS": allowed_hosts, "RLSTUDIO_BEHIND_TLS_PROXY": "1",
           "RLSTUDIO_STATE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
           "DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "--proxy-headers",
                             "rlstudio.config.asgi:application"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        for source, probe in _healthcheck_shells(port).items():
            while True:
                out = subprocess.run(["sh", "-c", probe], env={**env, "PORT": str(port)}, capture_output=True,
                                     text=True, timeout=30)
                if out.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                    break
                time.sleep(0.5)
            assert out.returncode == 0, (source, out.stderr)
            assert json.loads(out.stdout)["db"] == "ok", source
        bare = subprocess.run(["curl", "-fsS", f"http://127.0.0.1:{port}/healthz"], capture_output=True,
                              text=True, timeout=30)
        assert bare.returncode != 0  # the old probe: Host 127.0.0.1 is not the site's
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_only_the_tls_proxy_listens_beyond_loopback():
    services = _compose()["services"]
    for name, svc in services.items():
        for port in svc.get("ports", []):
            published = str(port)
            if name == "proxy":
                assert published in {"80:80", "443:443"}
            else:
                assert published.startswith("127.0.0.1:"), (name, published)
    assert not services["postgres"].get("ports") and not services["redis"].get("ports")


def _dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def test_dockerfile_copies_only_existing_paths_and_has_the_three_targets():
    text = _dockerfile()
    copies = re.findall(r"^COPY\s+(?!--from)(.+)$", text, flags=re.M)
    assert copies
    for line in copies:
        *sources, _dest = line.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    targets = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\w+)", text, flags=re.M | re.I))
    assert {"base", "web", "worker", "trainer"} <= targets
    # The run entrypoint (runs/launch.py) cds to the code and runs it with the same interpreter path
    # in every image; the web app reads templates/ and static/ from the repository root.
    assert "WORKDIR /app" in text and "PYTHONPATH=/app/platform:/app" in text
    for needed in ["manage.py", "platform", "trainer", "templates", "static"]:
        assert any(line.split()[0] == needed for line in copies), needed


def test_dockerfile_installs_pinned_torch_from_the_variant_index():
    text = _dockerfile()
    assert re.search(r"^ARG TORCH_VARIANT=cpu$", text, flags=re.M)
    assert 'download.pytorch.org/whl/${TORCH_VARIANT}' in text
    assert "grep -E '^torch==' requirements.txt" in text and "pip install -r requirements.txt" in text
    pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch==")]
    assert len(pins) == 1 and re.fullmatch(r"torch==\d+\.\d+\.\d+", pins[0])  # exact: CPU or +cuXXX build
    compose = _compose()["services"]
    assert compose["ray-gpu-worker"]["build"]["args"]["TORCH_VARIANT"] == "${TORCH_CUDA_VARIANT:-cu128}"


def test_kuberay_manifest():
    docs = list(yaml.safe_load_all((DOCKER / "k8s" / "raycluster.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]
    cluster = by_kind["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    ray_pin = re.search(r"^ray\[default\]==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.M).group(1)
    assert cluster["spec"]["rayVersion"] == ray_pin
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    head_container = head["template"]["spec"]["containers"][0]
    assert 8265 in [p["containerPort"] for p in head_container["ports"]]  # Jobs API = RAY_ADDRESS
    groups = cluster["spec"]["workerGroupSpecs"]
    gpu = [g for g in groups if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]
    assert gpu and gpu[0]["maxReplicas"] >= gpu[0]["minReplicas"]
    for pod in [head["template"]] + [g["template"] for g in groups]:
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claims == ["rlstudio-state"]
        mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert "/data" in mounts
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["RLSTUDIO_STATE_DIR"] == "/data"


# Field names of KubeRay's ray.io/v1 types (ray-operator/apis/ray/v1/raycluster_types.go): a misspelt
# key would be pruned by the API server without an error.
HEAD_GROUP_FIELDS = {"template", "headService", "enableIngress", "ingressOptions", "resources", "labels",
                     "rayStartParams", "serviceType"}
WORKER_GROUP_FIELDS = {"suspend", "groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds",
                       "priority", "resources", "labels", "rayStartParams", "template", "scaleStrategy",
                       "numOfHosts"}


@pytest.mark.parametrize("name", ["raycluster.yaml", "raycluster-nodes.yaml"])
def test_kuberay_manifests_use_only_kuberay_fields(name):
    cluster = next(d for d in yaml.safe_load_all((DOCKER / "k8s" / name).read_text()) if d["kind"] == "RayCluster")
    assert set(cluster["spec"]["headGroupSpec"]) <= HEAD_GROUP_FIELDS
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert set(group) <= WORKER_GROUP_FIELDS, group["groupName"]
        assert {"groupName", "template"} <= set(group)


def test_kuberay_nodes_manifest_holds_a_run_of_nnodes_whole_machines():
    """docker/k8s/raycluster-nodes.yaml: N fixed worker pods of G GPUs, one per machine, each able to hold
    one of the bundles the trainer asks for with trainer.nnodes=N, n_gpus_per_node=G."""
    from trainer.parallel.placement import plan_placement

    docs = list(yaml.safe_load_all((DOCKER / "k8s" / "raycluster-nodes.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    single = {d["kind"]: d for d in yaml.safe_load_all((DOCKER / "k8s" / "raycluster.yaml").read_text())}
    assert by_kind["PersistentVolumeClaim"] == single["PersistentVolumeClaim"]  # one shared claim
    cluster = by_kind["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    ray_pin = re.search(r"^ray\[default\]==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.M).group(1)
    assert cluster["spec"]["rayVersion"] == ray_pin
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0" and head["serviceType"] == "ClusterIP"
    (group,) = cluster["spec"]["workerGroupSpecs"]
    nnodes = group["replicas"]
    assert nnodes >= 2 and group["minReplicas"] == group["maxReplicas"] == nnodes and group["numOfHosts"] == 1
    pod = group["template"]["spec"]
    container = pod["containers"][0]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert limits == requests
    gpus = int(limits["nvidia.com/gpu"])
    plan = plan_placement(nnodes=nnodes, per_node=gpus, gpu=True)
    assert plan.strategy == "STRICT_SPREAD" and len(plan.bundles) == nnodes
    assert plan.bundles[0]["GPU"] == gpus and plan.bundles[0]["CPU"] <= int(limits["cpu"])
    (rule,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    assert rule["labelSelector"]["matchLabels"] == {"ray.io/cluster": cluster["metadata"]["name"],
                                                    "ray.io/group": group["groupName"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RLSTUDIO_STATE_DIR"] == "/data" and env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"]
    assert any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])
    for spec in (head["template"]["spec"], pod):
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert claims == ["rlstudio-state"]
        assert "/data" in {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
