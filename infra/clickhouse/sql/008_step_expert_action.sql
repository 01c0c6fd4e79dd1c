-- Step.expert_action (schemas/events.py): the task's scripted solver's action on the screen the
-- policy acted on, recorded by a rollout worker run with --expert-labels (DAgger's labels, which
-- the trainer imitates with --expert-coef); the action's JSON like `action`, '' when the step has
-- none (every row written before, and every step of a worker without the flag). Analysts read the
-- policy's agreement with the solver from it: for keys, the two actions' `key`; for clicks, a
-- distance between the two points (a solver clicks an element's centre, a policy its grid cell).

ALTER TABLE steps ADD COLUMN IF NOT EXISTS expert_action String DEFAULT '' AFTER next_screenshot_sha256;
