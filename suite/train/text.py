"""Training text classifiers (``hf:`` and built-in text models): the text side of the one training loop.

Text models are fine-tuned as they are. Methods take a tokenised batch (dynamic padding) and
perturb its word embeddings (:mod:`suite.train.text_methods`). The optimiser follows "Extreme
Confidence and the Illusion of Robustness", App. C (all methods): AdamW with β = (0.9, 0.999),
ε = 1e-8, weight decay 0.01, a constant learning rate (no schedule and no warm-up is stated;
footnote 6 reports that warm-up changed nothing). Every epoch validates clean accuracy, mean
confidence, the mean logit margin, the fraction of examples whose float32 softmax saturates to
exactly 1 (what blinds a score-based attack: Sec. 3) and ECE/NLL. ``best/`` holds the epoch of
the best validation accuracy; the top level is the last epoch, which the paper evaluates.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from suite.calibration import calibration_metrics
from suite.data.base import Example
from suite.data.config import DatasetConfig
from suite.data.hf_split import check_other_split
from suite.data.load import load_eval_set
from suite.errors import ConfigError, DataError
from suite.models import Classifier, ModelConfig, load_model
from suite.models.trainable import TrainableText
from suite.train.config import TrainConfig
from suite.train.modality import Modality, Prepared, split_examples

#: AdamW's moments and epsilon (App. C).
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
#: Examples per forward pass of validation.
VALIDATION_BATCH = 64


class TextTraining(Modality):
    """Text classifiers: AdamW, methods perturbing word embeddings, validated for accuracy and confidence."""

    name = "text"
    best_metric, best_key = "val_clean", "accuracy"

    def prepare(self) -> Prepared:
        config = self.config
        classifier = load_model(ModelConfig(spec=config.model, device=config.device))
        if classifier.modality != "text":
            raise ConfigError(f"{config.model!r} is an {classifier.modality} model: text training methods train "
                              "hf:<dir> and built-in text models")
        if config.model_args or config.input_size or config.num_classes:
            raise ConfigError("--model-args, --input-size and --num-classes describe a fresh image architecture; "
                              f"{config.model!r} is a text model and is fine-tuned as it is: drop them")
        model = TrainableText.from_classifier(classifier)
        examples = _examples(config, config.split, classifier)
        check_other_split(config.dataset, config.split, config.val_split, "--val-split")
        val_examples = _examples(config, config.val_split, classifier) if config.val_split is not None else None
        train_examples, val_examples = split_examples(config, examples, val_examples)
        return Prepared(model, train_examples, val_examples)

    def fingerprint(self, examples: list[Example]) -> str:
        digest = hashlib.sha256()
        for example in examples:
            digest.update(f"{example.id}\x1f{example.label}\x1f{example.input}\x1e".encode())
        return "sha256-" + digest.hexdigest()[:16]

    def batch(self, model: TrainableText, examples: list[Example]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        labels = torch.tensor([example.label for example in examples], device=model.device)
        return model.encode([example.input for example in examples]), labels

    def optimiser(self, model: TrainableText) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.config.lr, betas=BETAS, eps=ADAM_EPS,
                                 weight_decay=self.config.weight_decay)

    def validate(self, model: TrainableText, examples: list[Example]) -> dict[str, float]:
        """Clean accuracy, mean confidence, mean logit margin (top-1 minus top-2), the fraction of
        examples whose float32 softmax puts exactly 1.0 on the predicted class, ECE and NLL."""
        texts = [example.input for example in examples]
        with model.frozen() as classifier:
            logits = torch.cat([classifier.logits(texts[first : first + VALIDATION_BATCH])
                                for first in range(0, len(texts), VALIDATION_BATCH)]).float().cpu()
        labels = [example.label for example in examples]
        metrics = calibration_metrics(logits, labels)
        top = logits.topk(2, dim=1).values
        saturated = logits.softmax(dim=1).amax(dim=1) == 1.0
        return {"val_clean": round(metrics["accuracy"], 6), "val_confidence": metrics["mean_confidence"],
                "val_margin": float((top[:, 0] - top[:, 1]).mean()), "val_saturated": float(saturated.float().mean()),
                "val_ece": metrics["ece"], "val_nll": metrics["nll"]}

    def describe(self, metrics: dict[str, float]) -> str:
        return f"confidence {metrics['val_confidence']:.4f}"

    def curves(self) -> dict[str, Any]:
        return {"lines": (("val_clean", "clean accuracy"), ("val_confidence", "mean confidence"),
                          ("val_saturated", "saturated (p = 1 in float32)")), "ylabel": "validation (%)"}


def _examples(config: TrainConfig, split: str, classifier: Classifier) -> list[Example]:
    eval_set = load_eval_set(DatasetConfig(spec=config.dataset, split=split), classifier.input_spec, config.seed)
    if eval_set.modality != "text":
        raise DataError(f"{config.dataset!r} holds {eval_set.modality}; {config.model!r} is a text model")
    return eval_set.examples
