"""Policy models: the pixel CNN (pixel.py) and the Hugging Face language policy (lm.py).

Each registers its kind with infra.runtime.policy (found through the ``flywheel.policies`` entry points);
build and load them with ``infra.runtime.policy.build_policy`` / ``load_policy_version``.
"""
