"""The language policy's optimiser groups: the pretrained LM and the parts trained from scratch."""


def test_the_language_policys_fresh_parts_get_their_own_learning_rate():
    from trainer.policies.lm.model import build_lm_policy

    policy = build_lm_policy("lm-groups")
    lm, fresh = policy.param_groups(1e-4, 10.0)
    assert lm["lr"] == 1e-4 and fresh["lr"] == 1e-3
    ids = [id(p) for g in (lm, fresh) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(policy.parameters()))  # every parameter, once
    assert {id(p) for p in policy.vision.parameters()} <= {id(p) for p in fresh["params"]}
