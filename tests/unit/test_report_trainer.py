"""The report's trainer curves (app.report.plot_trainer): the policy's entropy over the run, beside
the entropy band's coefficient and self-imitation's figures where the updates recorded them."""

from __future__ import annotations

from app.report import plot_trainer, trainer_panels
from trainer.core import metric_names as M


def _rows(metrics: list[dict]) -> list[tuple]:
    return [(k + 1, k + 1, 0.0, m) for k, m in enumerate(metrics)]


def test_the_entropy_and_the_bands_coefficient_are_plotted_by_update(tmp_path):
    rows = _rows([{M.ENTROPY: 2.0 - k / 10, M.ENT_COEF: 0.003 * 1.5 ** k, M.SIL_LOSS: 0.4, "x/other": 1.0}
                  for k in range(5)])
    assert trainer_panels(rows) == [M.ENTROPY, M.ENT_COEF, M.SIL_LOSS]
    name = plot_trainer(rows, tmp_path / "trainer.png")
    assert name == "trainer.png" and (tmp_path / "trainer.png").stat().st_size > 1000


def test_a_run_without_the_band_plots_what_it_recorded():
    assert trainer_panels(_rows([{M.ENTROPY: 1.0, M.REWARD_MEAN: 0.5}])) == [M.REWARD_MEAN, M.ENTROPY]
    assert trainer_panels(_rows([{"x/a": 1.0, "x/b": 2.0}])) == ["x/a", "x/b"]
    assert plot_trainer([], None) is None
