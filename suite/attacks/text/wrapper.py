"""The bridge from a suite :class:`Classifier` to TextAttack's ``ModelWrapper`` protocol.

Unlike TextAttack's ``HuggingFaceModelWrapper``:

- queries go through the classifier's own batched, dynamically padded ``logits`` (never padded
  to ``model_max_length``), in eval mode and without gradients;
- :meth:`get_grad` takes input-embedding gradients in eval mode (TextAttack switches the model
  to train mode, which turns dropout on and makes gradient-ranked searches random);
- every query is counted (:attr:`queries`);
- logits are divided by the *adversary temperature* before TextAttack sees them. TextAttack's
  goal functions softmax the outputs, so an extreme served temperature saturates (T → 0) or
  flattens (T → ∞) every score and stalls the search ("Extreme Confidence and the Illusion of
  Robustness"); an aware adversary searches on ``logits / T_a`` instead. Only the search sees
  the rescaled scores; the suite scores the adversarial texts on the served model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from suite.models.base import Classifier


def make_wrapper(model: Classifier, batch_size: int = 32, temperature: float = 1.0):
    """A TextAttack ``ModelWrapper`` around ``model`` (TextAttack must be importable).

    Args:
        model: The served classifier.
        batch_size: Most texts per forward pass.
        temperature: Adversary temperature T_a: TextAttack sees ``served logits / T_a``.
    """
    from textattack.models.wrappers import ModelWrapper

    if not temperature > 0:
        raise ValueError(f"adversary temperature must be > 0, got {temperature}")

    class SuiteModelWrapper(ModelWrapper):
        """TextAttack view of a suite classifier: list of strings → logits / T_a (N×C, CPU)."""

        def __init__(self) -> None:
            self.model = model
            self.batch_size = batch_size
            self.temperature = float(temperature)
            self.queries = 0

        def __call__(self, text_input_list: Sequence[str]) -> torch.Tensor:
            texts = list(text_input_list)
            self.queries += len(texts)
            chunks = [
                model.logits(texts[start : start + self.batch_size]).cpu()
                for start in range(0, len(texts), self.batch_size)
            ]
            logits = torch.cat(chunks) if chunks else torch.empty(0, model.num_classes)
            # float32, as served: with T_a = 1 TextAttack sees exactly what an out-of-the-box
            # attack sees (saturation included). Relative precision survives the division.
            return logits if self.temperature == 1.0 else logits / self.temperature

        def get_grad(self, text_input: str) -> dict:
            """Gradient of the loss at the predicted class w.r.t. the input-token embeddings.

            Same output as TextAttack's ``HuggingFaceModelWrapper.get_grad`` (``ids``, and
            ``gradient`` of shape tokens × hidden), but the model stays in eval mode and its
            weights never require gradients. Needs a transformers model (``hf:``/``builtin:``).
            """
            module = getattr(model, "module", None)
            if module is None or not hasattr(module, "get_input_embeddings"):
                raise TypeError(f"{model.info.name} has no input embeddings to take gradients through")
            self.queries += 1
            encoded = model.tokenize([text_input])
            embeddings = module.get_input_embeddings()(encoded["input_ids"]).detach().requires_grad_(True)
            inputs = {key: value for key, value in encoded.items() if key != "input_ids"}
            with torch.enable_grad():
                logits = module(inputs_embeds=embeddings, **inputs).logits.float()
                logits = logits / (model.info.temperature * self.temperature)
                loss = torch.nn.functional.cross_entropy(logits, logits.argmax(dim=1))
                (gradient,) = torch.autograd.grad(loss, embeddings)
            return {"ids": encoded["input_ids"].cpu(), "gradient": gradient[0].cpu().numpy()}

        def _tokenize(self, inputs: Sequence[str]) -> list[list[str]]:
            tokenizer = getattr(model, "tokenizer", None)
            if tokenizer is None:
                return [text.split() for text in inputs]
            return [tokenizer.convert_ids_to_tokens(tokenizer(text, truncation=True)["input_ids"]) for text in inputs]

    return SuiteModelWrapper()
