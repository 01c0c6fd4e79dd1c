-- Step.sampled (schemas/events.py): false for a step whose action was not drawn from the policy,
-- the argmax of a `--greedy` rollout worker (or a chat backend at temperature 0) or a scripted
-- demonstration. Such trajectories are scored and routed to SFT/CT but never to RL, so analysts
-- filter them out of (or into) what the sampled policy did. Rows written before read true: every
-- worker until now sampled, except the scripted annotator (policy 'scripted-<policy>').

ALTER TABLE steps ADD COLUMN IF NOT EXISTS sampled Bool DEFAULT true AFTER logprob;
