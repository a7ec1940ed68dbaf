"""The ``demo:`` model scheme: ``demo:centroid``, a nearest-class-mean classifier of builtin:digits.

The class means of builtin:digits' training split are the weights of one linear layer: the logit
of class k is ``(2 x·m_k - |m_k|²) / T``, largest for the nearest mean (T = 10 keeps the logits
in a sensible range; it changes no prediction). No training loop and no download: it is built in
well under a second, and is right on about nine digits in ten.
"""

from __future__ import annotations

from suite.errors import UnknownNameError
from suite.models.base import Classifier, ModelInfo, TorchClassifier

#: Names ``demo:<name>`` accepts.
NAMES = ("centroid",)
TEMPERATURE = 10.0


class DemoClassifier(TorchClassifier):
    """A torch module over 1×32×32 digit images in [0, 1]."""

    modality = "image"
    input_size = (1, 32, 32)

    def __init__(self, module, labels: list[str], spec: str, device=None) -> None:
        super().__init__(module, device)
        self.labels = labels
        self.info = ModelInfo(spec=spec, extra={"plugin": "advsuite-demo-plugin"})

    def _forward(self, batch):
        return self.module(batch.to(self.device))


def centroid_module():
    """The nearest-class-mean linear layer of builtin:digits (train split)."""
    import torch
    from torch import nn

    from suite.data.builtin import digits

    split = digits("train")
    images = torch.stack([torch.as_tensor(image, dtype=torch.float32) for image in split.inputs]).flatten(1)
    labels = torch.tensor(split.labels)
    means = torch.stack([images[labels == k].mean(dim=0) for k in range(len(split.label_names))])
    layer = nn.Sequential(nn.Flatten(), nn.Linear(images.shape[1], len(means)))
    with torch.no_grad():
        layer[1].weight.copy_(2 * means / TEMPERATURE)
        layer[1].bias.copy_(-(means**2).sum(dim=1) / TEMPERATURE)
    return layer, list(split.label_names)


def load_demo(name: str, config) -> Classifier:
    """``demo:<name>`` → the demo plugin's model ``name`` (``centroid``)."""
    if name not in NAMES:
        raise UnknownNameError(f"unknown demo model {name!r}. Available: {', '.join(NAMES)}.")
    module, labels = centroid_module()
    return DemoClassifier(module, labels, f"demo:{name}", config.device)
