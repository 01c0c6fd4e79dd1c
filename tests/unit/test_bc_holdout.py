"""trainer.sft.holdout (python -m benchmarks.bc_holdout): which demonstrations train and which are held out."""

import pytest

from trainer.sft.holdout import split


def test_the_last_episodes_of_each_task_are_held_out():
    by_task = {"games.2048": ["a1", "a2", "a3"], "games.snake": ["s1", "s2", "s3", "s4"]}
    train, test = split(by_task, 1)
    assert train == ["a1", "a2", "s1", "s2", "s3"] and test == ["a3", "s4"]


def test_a_task_with_too_few_demonstrations_is_refused_by_name():
    with pytest.raises(SystemExit, match="games.mines"):
        split({"games.2048": ["a1", "a2"], "games.mines": ["m1"]}, 1)
