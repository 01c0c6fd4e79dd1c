"""`flywheel deploy render`: the deployment follows the topic catalog, validates, and inlines no secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.deploy import DeployConfig, min_insync, render
from infra.runtime.config import ConfigError
from infra.runtime.topics import TOPICS

ROOT = Path(__file__).resolve().parents[2]


def test_one_kafka_topic_per_catalog_topic_with_every_setting():
    cfg = DeployConfig(kafka_replicas=3)
    topics = {d["spec"]["topicName"]: d for d in render(cfg)["topics.yaml"]}
    assert set(topics) == {s.name for s in TOPICS.all()}
    for spec in TOPICS.all():
        t = topics[spec.name]
        assert t["kind"] == "KafkaTopic" and t["metadata"]["labels"]["strimzi.io/cluster"] == cfg.kafka_cluster
        assert t["spec"]["partitions"] == spec.partitions
        assert t["spec"]["replicas"] == 3
        assert t["spec"]["config"] == spec.config(2)  # what `flywheel topics` sets on three brokers
        assert t["spec"]["config"]["cleanup.policy"] == spec.cleanup
        assert t["spec"]["config"]["max.message.bytes"] == str(spec.max_message_bytes)
        if spec.cleanup == "delete":
            assert t["spec"]["config"]["retention.ms"] == str(spec.retention_ms)
    assert topics[TOPICS.policy.name]["spec"]["config"]["cleanup.policy"] == "compact"


def test_min_insync_survives_one_broker_down():
    assert (min_insync(1), min_insync(2), min_insync(3), min_insync(5)) == (1, 1, 2, 2)


def test_single_broker_deployment_scales_replication_down():
    topics = render(DeployConfig(kafka_replicas=1))["topics.yaml"]
    assert {t["spec"]["replicas"] for t in topics} == {1}
    assert {t["spec"]["config"]["min.insync.replicas"] for t in topics} == {"1"}


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_secrets_are_referenced_never_inlined():
    files = render(DeployConfig())
    manifests = [d for content in files.values() if not isinstance(content, str) for d in content]
    envs = [n for d in manifests for n in _walk(d) if "name" in n and ("value" in n or "valueFrom" in n)]
    secret_envs = [e for e in envs if "PASSWORD" in e["name"] or e["name"].endswith("_KEY")]
    assert secret_envs, "the workloads need their passwords from somewhere"
    for e in secret_envs:
        assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
    cm = next(d for d in manifests if d["kind"] == "ConfigMap")
    assert not [k for k in cm["data"] if "PASSWORD" in k or k.endswith("_KEY")]
    assert cm["data"]["FLYWHEEL_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"


def test_every_stage_has_a_workload_and_the_image_has_the_browser():
    files = render(DeployConfig())
    kinds = {(d["kind"], d["metadata"]["name"]) for d in files["workloads.yaml"]}
    for name in ("rollout", "streams", "sink", "policy-server"):
        assert ("Deployment", name) in kinds
    assert ("Job", "trainer") in kinds
    assert ("Job", "clickhouse-migrate") in {(d["kind"], d["metadata"]["name"]) for d in files["clickhouse.yaml"]}
    assert "chromium" in files["Dockerfile"] and "xvfb" in files["Dockerfile"]
    with_url = render(DeployConfig(clickhouse_url="http://ch.example:8123"))["clickhouse.yaml"]
    assert [d["kind"] for d in with_url] == ["Job"]  # a server by URL: no installation rendered


def test_core_manifests_validate_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is in the test extra")
    files = render(DeployConfig())
    checked = 0
    for name, content in files.items():
        if isinstance(content, str):
            continue
        for d in content:
            if d["apiVersion"] in ("v1", "apps/v1", "batch/v1"):  # Strimzi/Altinity CRDs ship no schema offline
                kv.validate(d, "1.30.0", strict=True)
                checked += 1
    assert checked >= 8


def test_cli_writes_the_files(tmp_path):
    out = tmp_path / "deploy"
    proc = subprocess.run([sys.executable, "-m", "app.cli", "deploy", "render", "--out", str(out),
                           "--kafka-replicas", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["Dockerfile", "clickhouse.yaml", "kafka.yaml", "topics.yaml",
                                                     "workloads.yaml"]
    assert len(list(yaml.safe_load_all((out / "topics.yaml").read_text()))) == len(TOPICS.all())


def _trainer(cfg: DeployConfig) -> dict:
    (job,) = [d for d in render(cfg)["workloads.yaml"] if d["kind"] == "Job" and d["metadata"]["name"] == "trainer"]
    return job["spec"]["template"]["spec"]["containers"][0]


def test_the_trainer_asks_for_a_gpu_only_for_the_language_policy_and_uses_it():
    pixel = _trainer(DeployConfig(trainer_ranks=2))
    assert pixel["command"][:2] == ["torchrun", "--nproc-per-node=2"] and "--device" not in pixel["command"]
    assert "nvidia.com/gpu" not in pixel["resources"]["limits"]  # the pixel policy trains on the CPU
    lm = _trainer(DeployConfig(policy_kind="lm"))
    assert lm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert lm["command"][:2] == ["torchrun", "--nproc-per-node=1"]
    assert lm["command"][-4:] == ["--policy-kind", "lm", "--device", "cuda"]
    with pytest.raises(ConfigError, match="trainer_ranks=2 with policy_kind lm"):
        render(DeployConfig(policy_kind="lm", trainer_ranks=2))


@pytest.mark.parametrize("kind", ["pixel", "lm"])
def test_every_rendered_flywheel_command_parses_with_the_real_cli(kind):
    """A rendered container command the CLI refuses crash-loops its pod: the policy server's was
    rendered with --policy-name, an option `flywheel serve` does not have (it is --policy)."""
    from app.cli import build_parser

    commands = []
    for files in render(DeployConfig(policy_kind=kind)).values():
        for d in files if isinstance(files, list) else []:
            template = d.get("spec", {}).get("template", {})
            commands += [c["command"] for c in template.get("spec", {}).get("containers", [])]
    argvs = [c[1:] if c[0] == "flywheel" else c[c.index("app.cli") + 1:] for c in commands]
    assert {a[0] for a in argvs} >= {"rollout", "streams", "sink", "serve", "train", "migrate"}
    for argv in argvs:
        args = build_parser().parse_args(argv)  # argparse exits (SystemExit) on an unknown option
        if argv[0] in ("serve", "train"):
            assert (args.kind if argv[0] == "serve" else args.policy_kind) == kind
            assert args.device == "cuda" if kind == "lm" else args.device in (None, "cpu")  # None: the default, cpu
