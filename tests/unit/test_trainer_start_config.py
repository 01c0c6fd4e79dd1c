"""A trainer continuing a published version keeps that version's config: it names the entries of
its own --policy-config that it therefore does not apply (the demo's --start-from)."""

from trainer.rl.start import config_not_applied


def test_a_trainer_continuing_a_version_names_the_policy_config_it_does_not_apply():
    kept = {"ground": True, "coords": True, "seed": 0, "grid": 20}
    assert config_not_applied({"ground": False, "coords": True, "seed": 3, "keys": ["up"]}, kept) == {"ground": False}
    assert config_not_applied({"ground": True, "seed": 1}, kept) == {}
    assert config_not_applied({}, kept) == {}
