"""Adversary temperature and calibration metrics ("Extreme Confidence and the Illusion of
Robustness in Adversarial Training").

- :mod:`.metrics`: ECE, MCE (15 equal-width bins), NLL, mean confidence, reliability data;
- :mod:`.temperature`: the ``cal`` adversary (NLL-optimal temperature) and the ``opt``
  adversary (the temperature minimising an attack's adversarial accuracy, by Brent's method).
"""

from suite.calibration.metrics import calibration_metrics
from suite.calibration.temperature import OptSearch, fit_nll_temperature, optimise_temperature

__all__ = ["OptSearch", "calibration_metrics", "fit_nll_temperature", "optimise_temperature"]
