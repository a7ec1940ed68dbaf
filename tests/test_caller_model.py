"""A model handed to the Python API: evaluated in eval mode whatever its mode, and given back as
it was (mode, requires_grad, weights); weights or labels the suite cannot run are one line."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import suite
from suite.errors import ConfigError, DataError
from suite.models.wrap import from_module


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.rand(24, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    return images, (images.mean(dim=(1, 2, 3)) * 12).long() % 3


def _net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5), nn.Flatten(),
                         nn.Linear(144, 3))


def _robust(results) -> float:
    return results.attacks["pgd_linf"].robust_accuracy


def test_a_module_in_train_mode_is_evaluated_in_eval_mode_and_given_back_as_it_was():
    """It came back in eval mode with every parameter frozen (training it further raised "element
    0 of tensors does not require grad"); in train mode its dropout would have been scored."""
    images, labels = _data()
    module = _net().train()
    module[0].weight.requires_grad_(False)  # partly frozen: kept so
    state = copy.deepcopy(module.state_dict())
    reference = copy.deepcopy(module).eval()
    found = suite.evaluate(module, (images, labels), attacks=["pgd_linf"], eps=0.05)
    assert module.training and all(child.training for child in module)
    assert [parameter.requires_grad for parameter in module.parameters()] == [False, True, True, True, True, True]
    assert all(torch.equal(state[key], value) for key, value in module.state_dict().items())
    expected = suite.evaluate(reference, (images, labels), attacks=["pgd_linf"], eps=0.05)
    assert _robust(found) == _robust(expected) and found.clean_accuracy == expected.clean_accuracy
    assert not any("random" in warning for warning in found.warnings), found.warnings


def test_a_wrapped_module_put_back_in_train_mode_is_not_scored_by_its_batch_statistics():
    """Its BatchNorm statistics were updated by the evaluation and its dropout made it look
    randomized (scored by EOT): now eval mode for the run, and train mode again after."""
    images, labels = _data()
    module = _net()
    classifier = from_module(module, input_size=(1, 8, 8))
    expected = suite.evaluate(classifier, (images, labels), attacks=["pgd_linf"], eps=0.05)
    module.train()
    state = copy.deepcopy(module.state_dict())
    found = suite.evaluate(classifier, (images, labels), attacks=["pgd_linf"], eps=0.05)
    assert _robust(found) == _robust(expected) and module.training
    assert all(torch.equal(state[key], value) for key, value in module.state_dict().items())


@pytest.mark.parametrize(("change", "message"), [
    (lambda module: module.double(), "the module's weights are float64"),
    (lambda module: module.to("meta"), "on the meta device"),
])
def test_weights_it_cannot_run_are_one_line(change, message):
    with pytest.raises(ConfigError, match=message):
        from_module(change(_net()), input_size=(1, 8, 8))


def test_an_input_size_or_labels_the_module_does_not_match_are_one_line():
    with pytest.raises(ConfigError, match=r"the module fails on a 1×3×8×8 input .*expected input\[1, 3, 8, 8\]"):
        from_module(_net(), input_size=(3, 8, 8))
    with pytest.raises(ConfigError, match="labels names 2 classes, but the module gives 3 logits"):
        from_module(_net(), input_size=(1, 8, 8), labels=["a", "b"])


def test_labels_as_numpy_are_class_indices_and_nan_is_refused():
    images, labels = _data()
    module = _net()
    as_numpy = suite.evaluate(module, (images, labels.numpy()), attacks=["pgd_linf"], eps=0.05)
    as_tensor = suite.evaluate(module, (images, labels), attacks=["pgd_linf"], eps=0.05)
    assert _robust(as_numpy) == _robust(as_tensor)
    with pytest.raises(DataError, match="label nan is not a class index"):
        suite.evaluate(module, (images, [float("nan")] * len(images)), attacks=["pgd_linf"], eps=0.05)
    with pytest.raises(DataError, match="meta device"):
        suite.evaluate(from_module(module, input_size=(1, 8, 8)), (images.to("meta"), labels))


def test_a_model_that_clamps_its_input_is_said_to_mask_its_gradient_at_the_edge(digits_model, digits_examples):
    """torch's clamp passes no gradient at its bounds, and random starts and projections put pixels
    exactly there: a CNN that clamped its input scored 93.8 % under auto where the same function
    without the clamp scored 28.1 %, and no check spoke."""
    from suite.models.builtin import DIGITS_MEAN, DIGITS_STD

    class Normalised(nn.Module):
        def __init__(self, clamp: bool) -> None:
            super().__init__()
            self.net, self.clamp = digits_model.module, clamp
            self.register_buffer("mean", torch.tensor(DIGITS_MEAN).view(1, -1, 1, 1))
            self.register_buffer("std", torch.tensor(DIGITS_STD).view(1, -1, 1, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(((x.clamp(0, 1) if self.clamp else x) - self.mean) / self.std)

    images = torch.stack([example.input for example in digits_examples[:16]])
    labels = torch.tensor([example.label for example in digits_examples[:16]])
    said = "the input gradient is zero on the edge of the pixel box"
    clamped = suite.evaluate(Normalised(True), (images, labels), attacks=["pgd_linf"], eps=0.05)
    plain = suite.evaluate(Normalised(False), (images, labels), attacks=["pgd_linf"], eps=0.05)
    assert any(said in warning for warning in clamped.warnings), clamped.warnings
    assert not any(said in warning for warning in plain.warnings), plain.warnings


class _BatchAveraged(torch.autograd.Function):
    """The identity, whose backward pass divides by the batch: a mean loss built into the model."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad / len(grad)


class _Pixels(nn.Module):
    """builtin:digits-cnn's network on [0, 1] pixels, and three ways to hide its gradient or tie
    its answers to the batch, each computing the same decisions (or the same function)."""

    def __init__(self, digits_model, kind: str = "plain") -> None:
        from suite.models.builtin import DIGITS_MEAN, DIGITS_STD

        super().__init__()
        self.net, self.kind = copy.deepcopy(digits_model.module), kind
        self.register_buffer("mean", torch.tensor(DIGITS_MEAN).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(DIGITS_STD).view(1, -1, 1, 1))
        self.register_buffer("mask", torch.rand(1, 1, 32, 32, generator=torch.Generator().manual_seed(1)) < 0.5)
        eye = torch.eye(64).view(64, 1, 8, 8)
        upsampled = nn.functional.interpolate(eye, size=(32, 32), mode="bilinear", align_corners=False).view(64, -1).T
        self.register_buffer("projector", upsampled @ torch.linalg.pinv(upsampled))  # onto the digits' subspace
        if kind == "batch-statistics":
            self.net.bn1.track_running_stats = False
            self.net.bn1.running_mean = self.net.bn1.running_var = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "detached":
            x = torch.where(self.mask, x.detach(), x)
        if self.kind == "batch-averaged-gradient":
            x = _BatchAveraged.apply(x)
        logits = self.net((x - self.mean) / self.std)
        if self.kind != "off-the-data":
            return logits
        flat = x.flatten(1)
        off = torch.sigmoid(1e4 * ((flat - flat @ self.projector.T).norm(dim=1, keepdim=True) - 1e-3))
        answer = (10.0 * nn.functional.one_hot(logits.argmax(1), logits.shape[1]).float()).detach()
        return (1 - off) * logits + off * answer  # the same decision everywhere, no gradient off the data


@pytest.mark.parametrize("kind, said", [
    ("off-the-data", "it vanishes off the data"),
    ("detached", "part of the input reaches the model without a gradient"),
    ("batch-statistics", "its outputs depend on the rest of the batch"),
    ("batch-averaged-gradient", "its backward pass depends on the batch"),
])
def test_gradients_hidden_off_the_data_or_on_some_pixels_and_batch_dependent_answers_are_said(
        digits_model, digits_examples, kind, said):
    """Each scored far above the same decisions' robust accuracy with no warning: gradient zero
    farther than 1e-3 from the digits' subspace 92.2 % for 42.2 % (digits-cnn-at, L∞ 0.15); half
    of the pixels detached 73.4 %; BatchNorm on batch statistics 48.4 % at batch 32, 31.2 % at 1;
    a gradient divided by the batch (fp16, the CNN at T = 0.5) 80 % at batch 128, 20 % at 1."""
    images = torch.stack([example.input for example in digits_examples[:16]])
    labels = torch.tensor([example.label for example in digits_examples[:16]])
    plain = suite.evaluate(_Pixels(digits_model), (images, labels), attacks=["pgd_linf"], eps=0.03)
    hidden = suite.evaluate(_Pixels(digits_model, kind), (images, labels), attacks=["pgd_linf"], eps=0.03)
    assert any(said in warning for warning in hidden.warnings), hidden.warnings
    assert not plain.warnings, plain.warnings
    if kind != "batch-statistics":  # the same decisions
        assert hidden.clean_accuracy == plain.clean_accuracy
    if kind == "off-the-data":  # and an attack that no longer finds what it found
        assert hidden.attacks["pgd_linf"].robust_accuracy > plain.attacks["pgd_linf"].robust_accuracy


def test_logits_of_another_shape_than_the_batch_and_classes_are_one_line():
    """A module whose output count changed with the batch (10 alone, 5 in a batch) failed with an
    index error deep in the scoring."""
    class Shifty(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            logits = self.linear(x.flatten(1))
            return logits if len(x) == 1 else logits[:, :5]

    images = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match=r"gave logits of shape \(8, 5\) for 8 input\(s\); it has 10 classes"):
        suite.evaluate(Shifty(), (images, torch.arange(8)), attacks=["pgd_linf"], eps=0.05)


def test_a_module_of_one_output_is_refused_in_one_line():
    """A single score (a regression, a sigmoid head) has no class to flip to: every label would
    read as class 0, and robust accuracy would be the share of label 0."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 1))
    images = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    for run in (lambda: suite.evaluate(module, (images, torch.zeros(8, dtype=torch.long)), attacks=["pgd_linf"],
                                       eps=0.05),
                lambda: suite.certify(module, (images, torch.zeros(8, dtype=torch.long)), eps=[0.1])):
        with pytest.raises(ConfigError, match="logits of shape N×K with K ≥ 2"):
            run()


def test_a_text_holding_a_lone_surrogate_is_one_line(sentiment_model):
    """A lone surrogate ("\\ud800", what decoding bytes with errors='surrogateescape' leaves) is
    no Unicode text: the data's fingerprint raised UnicodeEncodeError, a traceback."""
    with pytest.raises(DataError, match=r"text 1 holds '\\ud800' at character 4, a lone surrogate"):
        suite.evaluate(sentiment_model, (["good film", "bad \ud800 film"], [1, 0]), attacks=["deepwordbug"])
