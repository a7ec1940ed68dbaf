"""advsuite: adversarial robustness evaluation with no illusions."""

__version__ = "0.1.0"
