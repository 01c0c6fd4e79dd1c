"""A long update must not cost the trainer its partitions: the consumer's max.poll.interval.ms
follows --max-update-s (an update of the language policy on 2 cores took over 5 minutes, past
librdkafka's 300 s default, and the trainer left its group mid-run)."""

import pytest

from infra.runtime.config import ConfigError
from trainer.rl.config import TrainConfig
from trainer.sft.lm_config import LMTrainConfig


def test_the_update_bound_is_validated():
    assert TrainConfig().validate().max_update_s == 1800.0
    with pytest.raises(ConfigError, match="session_timeout_s"):
        TrainConfig(max_update_s=10.0).validate()  # below the session timeout: librdkafka refuses it
    with pytest.raises(ConfigError):
        LMTrainConfig(max_update_s=0.0).validate()


def test_the_trainer_consumer_gets_the_bound(monkeypatch, tmp_path):
    import threading

    from infra.runtime import consume_loop
    from trainer.rl import streaming_ppo as stream

    seen = {}

    def fake_create(settings, group_id, topics, stage, stage_name, cfg, commit=None, **overrides):
        seen.update(overrides)
        raise RuntimeError("stop here")

    monkeypatch.setattr(consume_loop.ConsumeLoop, "create", staticmethod(fake_create))
    monkeypatch.setattr(stream, "start_policy", lambda *a, **k: (object(), object()))
    monkeypatch.setattr(stream, "PPOLearner", lambda *a, **k: type("L", (), {"committed": lambda self: None})())
    monkeypatch.setattr(stream, "CheckpointFile", lambda *a, **k: None)
    cfg = TrainConfig(max_update_s=900.0).validate()
    with pytest.raises(RuntimeError, match="stop here"):
        stream.train(cfg, _settings(tmp_path), threading.Event())
    assert seen["max.poll.interval.ms"] == 900_000 and seen["session.timeout.ms"] == 45_000


def _settings(tmp_path):
    from infra.runtime.settings import load_settings

    return load_settings({"data_dir": str(tmp_path)})
