"""The ``nn.Module`` the torchattacks baselines attack: a classifier that counts its queries.

Kept apart from :mod:`suite.attacks.image.baselines` so that registering (and validating) the
baseline attacks does not import torch: this class subclasses ``torch.nn.Module`` when it is
defined, and is imported only when a baseline runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from suite.models.base import Classifier


class QueryCountingModule(nn.Module):
    """A :class:`Classifier` as the ``nn.Module`` torchattacks expects, counting queries.

    Args:
        model: The classifier (inputs in [0, 1]; normalisation happens inside it).
        origins: The clean inputs of the batch; each row the module sees is charged to the
            nearest of them.
        on_call: Called once per forward pass (a progress bar's ``update``).
        size: H×W the classifier takes, when the attack works on a larger canvas (the top-left
            H×W of each row is the image; the rest is padding the classifier never sees).
    """

    def __init__(self, model: Classifier, origins: torch.Tensor, on_call: Callable[[], object] | None = None,
                 size: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.size = size
        self.model = model
        self.origins = origins.flatten(1)
        self.queries = torch.zeros(len(origins), dtype=torch.long, device=origins.device)
        self.on_call = on_call
        # torchattacks reads the device from the first parameter.
        self.anchor = nn.Parameter(torch.empty(0, device=origins.device), requires_grad=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.size is not None:
            inputs = inputs[..., : self.size[0], : self.size[1]]
        with torch.no_grad():
            nearest = torch.cdist(inputs.detach().flatten(1).float(), self.origins, p=float("inf")).argmin(dim=1)
            self.queries.index_add_(0, nearest, torch.ones_like(nearest))
        if self.on_call is not None:
            self.on_call()
        return self.model.logits(inputs, grad=torch.is_grad_enabled())
