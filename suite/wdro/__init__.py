"""WDRO robustness certificates (Le et al., "Tight Robustness Certificates and Wasserstein
Distributional Attacks for Deep Neural Networks", Sec. 3): bounds on the worst expected loss over
the W_1 ball, sup_{W_1(P, P_N) ≤ ε} E_P[ℓ], from the model's input Jacobians."""

from __future__ import annotations

from suite.wdro.bounds import Certificate, certify, jacobians, jacobians_loop, operator_norms

__all__ = ["Certificate", "certify", "jacobians", "jacobians_loop", "operator_norms"]
