"""Policy kinds, one package each (pixel: the CNN; lm: the Hugging Face language policy), with
everything the kind needs: model, config, behaviour cloning, preference pairs, export.

Each package's ``kind`` module exports its plug-in (``infra.runtime.policy.PolicyKind``, defaults
in ``base``), found by name through the ``flywheel.policies`` entry points; build and load
policies with ``infra.runtime.policy.build_policy`` / ``load_policy_version``.
"""
