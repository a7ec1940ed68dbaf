"""The public Python API of certificates: ``suite.certify(model, data, ...)``.

It is what ``advsuite certify`` runs: the model and data take every form
:func:`suite.evaluation.api.evaluate` takes (specs, configs, a :class:`Classifier`, a plain
``nn.Module``, tensors in memory), resolved by the same code; the report is
:func:`~suite.evaluation.certification.certification_report`'s with the dataset added. With
``output`` set it writes ``certificate.json`` and ``certificate.png`` there; without it,
nothing touches the disk. Bad input raises a :class:`~suite.errors.SuiteError` subclass whose
message is the line the CLI prints.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from suite.wdro.bounds import CertLoss, CostNorm
from suite.collector import long_lived_frozen
from suite.data.base import Example
from suite.data.load import load_eval_set
from suite.errors import ConfigError, SuiteError
from suite.evaluation.api import DatasetLike, ModelLike, check_arguments, radii, resolve_data, resolve_model
from suite.evaluation.certification import certification_report
from suite.models import Classifier, ModelConfig, load_model, require_classes
from suite.models.card import default_dataset
from suite.models.ensemble import is_ensemble
from suite.models.registry import is_ensemble_spec, spec_modality

#: What ``certify`` writes into its output directory (and may overwrite on a rerun).
CERTIFY_FILES = ("certificate.json", "certificate.png")

#: The W_1 budgets of a call that names none (the CLI's ``--eps`` default).
DEFAULT_EPS = (0.05, 0.1, 0.2, 0.5)


def certify(
    model: ModelLike,
    data: DatasetLike | None,
    *,
    norm: CostNorm = "l2",
    loss: CertLoss = "ce",
    eps: float | Sequence[float] = DEFAULT_EPS,
    n: int | None = 100,
    split: str = "test",
    seed: int = 0,
    boxed: bool = True,
    attacks: bool = True,
    device: str | None = None,
    output: str | Path | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """The W_1 certificate of an image model on ``data``, over the budgets ``eps``.

    Args:
        model: Any form :func:`suite.evaluate` takes: a spec (``"builtin:digits-cnn"``,
            ``"timm:<name or dir>"``, a plugin's scheme) or a :class:`~suite.models.ModelConfig`;
            a :class:`~suite.models.Classifier`; or a plain ``torch.nn.Module`` taking [0, 1]
            pixels of the images' size (:func:`suite.models.wrap.from_module` gives it a mean,
            std and labels). Text models and randomized ensembles are refused.
        data: A spec (``"builtin:digits"``, ``"hf:<name or file>"``) or a
            :class:`~suite.data.config.DatasetConfig`; an :class:`~suite.data.base.EvalSet`; or
            ``(images, labels)`` with images an N×C×H×W float tensor in [0, 1]. ``None``: the
            data the model names (a built-in's training set, a card's first dataset).
        norm: The ground cost ‖x′ − x‖_r: ``l2``, ``linf`` or ``l1``.
        loss: ``ce`` (cross-entropy) or ``margin`` (max_k θ_k − θ_y).
        eps: The W_1 budgets: one, or several (each finite and ≥ 0, none twice).
        n: Certify a seeded subsample of n examples (the empirical distribution); ``None``: all.
        split: Dataset split (specs only).
        seed: Seed of the subsample and of the Wasserstein attacks.
        boxed: Certify on [0, 1] pixels; ``False``: on all of R^n (gives eq. 17's lower bound).
        attacks: Also report the W_1 losses the Wasserstein attacks (WDA, WDA++) reach.
        device: ``cpu``, ``cuda``, ``cuda:1`` for a spec or a plain module (default: CUDA when
            present); a Classifier stays where it is.
        output: Directory for ``certificate.json`` and ``certificate.png``; ``None`` writes nothing.
            One holding another model's or dataset's certificate is refused unless ``overwrite``.

    Returns:
        The report: :func:`~suite.evaluation.certification.certification_report`'s, with
        ``dataset`` (spec, split, n and fingerprint of the examples), as ``certificate.json`` holds it.

    Raises:
        SuiteError: A subclass (``ConfigError``, ``DataError``, ``UnknownNameError``,
            ``ResourceMissingError``) with the same one-line message as the CLI.
    """
    check_arguments(eps=eps, n=n, output=output, split=split)  # eps="0.1" was read as the budgets '0', '.', '1'
    for name, value in (("boxed", boxed), ("attacks", attacks), ("overwrite", overwrite)):
        if not isinstance(value, bool):  # boxed="False" ran boxed and recorded "False"
            raise ConfigError(f"{name} must be True or False, not {value!r}")
    budgets = _budgets(eps)
    _check_options(norm, loss, n, seed)
    n, seed = None if n is None else int(n), int(seed)  # numpy's integers too (JSON takes only int)
    directory = None if output is None else Path(output)
    if directory is not None:
        check_output(directory)  # before anything loads or runs
    from suite.models.wrap import lent

    with lent(model):  # the caller's model in eval mode for the run, and as it was after
        classifier, model_config = resolve_model(model, data, device=device)
        if classifier is None:
            refuse_by_spec(model_config.spec)  # before loading: a text model or an ensemble needs no download
        if data is None:
            data = _default_dataset(model_config.spec)
        classifier, eval_set, dataset_config = resolve_data(data, classifier, model_config, split=split, n=n, seed=seed)
        classifier = classifier if classifier is not None else load_model(model_config)
        require_classes(classifier)
        refuse_uncertifiable(classifier)
        if eval_set is None:
            eval_set = load_eval_set(dataset_config, classifier.input_spec, seed)
        if not eval_set.examples:
            raise ConfigError(f"dataset {dataset_config.spec!r} split {dataset_config.split!r} has no examples")
        refuse_randomized(classifier, eval_set.examples)
        if directory is not None and not overwrite:
            check_replaces(directory, classifier.info.name, dataset_config.spec, dataset_config.split)
        with long_lived_frozen():  # the modules, model and data out of the collector's scans
            report = certification_report(classifier, eval_set.examples, norm=norm, loss=loss, eps=list(budgets),
                                          boxed=boxed, attacks=attacks, seed=seed)
        report["dataset"] = {"spec": dataset_config.spec, "split": dataset_config.split, "n": len(eval_set.examples),
                             "fingerprint": eval_set.fingerprint}
        if directory is not None:
            from suite.report.certificates import write_certificate

            write_certificate(report, directory)
        return report


def refuse_by_spec(spec: str) -> None:
    """Refuse, from the spec alone, a model certify cannot take: a text model (``hf:``, text
    built-ins) or a randomized ensemble (``ensemble:``, ``builtin:digits-bat``)."""
    if spec_modality(spec) == "text":
        raise ConfigError(f"certify works on image models (input Jacobians of [0, 1] pixels); {spec!r} takes text")
    if is_ensemble_spec(spec):
        raise ConfigError(_ensemble_message(spec))


def refuse_uncertifiable(model: Classifier) -> None:
    """Refuse a loaded model certify cannot take: one that takes text, or a randomized ensemble."""
    if model.modality != "image":
        raise ConfigError(f"certify works on image models (input Jacobians of [0, 1] pixels); {model.info.name!r} "
                          f"takes {model.modality}")
    if is_ensemble(model):
        raise ConfigError(_ensemble_message(model.info.name))


def refuse_randomized(model: Classifier, examples: Sequence[Example]) -> None:
    """Refuse a model that answers identical queries differently (noise on its input, dropout
    left on): the bounds and the attacks' losses are of one fixed function, and a random one
    has none (two passes of its first examples, as ``evaluate`` probes)."""
    from suite.models.randomized import probe_randomness

    changes, difference, flipped, _ = probe_randomness(model, [example.input for example in examples])
    if changes:
        raise ConfigError(f"certify needs one deterministic model; {model.info.name!r} is randomized (its logits "
                          f"differ by up to {difference:.3g} across identical queries, {flipped} decisions flipped), "
                          "which the bounds do not cover: certify it without its randomness, and evaluate it with "
                          "advsuite evaluate (EOT, expected accuracy)")


def _ensemble_message(name: str) -> str:
    return (f"certify needs one deterministic model; {name!r} is a randomized ensemble (each query is answered by a "
            "member drawn at random, which the bounds do not cover): certify each member")


def check_output(directory: Path) -> None:
    """Refuse an output path that is (or lies under) a file, or a directory holding files certify
    did not write."""
    from suite.paths import writable_parent

    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"output {str(directory)!r} is a file, not a directory: choose another --output")
    writable_parent(directory)
    if directory.is_dir():
        foreign = sorted(item.name for item in directory.iterdir() if item.name not in CERTIFY_FILES)
        if foreign:
            raise ConfigError(f"output {str(directory)!r} holds files advsuite certify did not write "
                              f"({', '.join(foreign[:3])}{'...' if len(foreign) > 3 else ''}): choose another directory")


def check_replaces(directory: Path, model: str, dataset: str, split: str) -> None:
    """Refuse, before anything is computed, to replace a certificate of another model or dataset
    (a rerun for the same ones, at other budgets or n, replaces its own)."""
    import suite.strict_json as strict_json

    path = directory / CERTIFY_FILES[0]
    if not path.is_file():
        return
    try:
        old = strict_json.read_json(path, "certificate")
        then = (old["model"], old["dataset"]["spec"], old["dataset"]["split"])
    except (SuiteError, KeyError, TypeError) as error:
        raise ConfigError(f"{str(path)!r} is not a certificate advsuite can read; pass --overwrite to replace it, or "
                          "choose another --output") from error
    if then != (model, dataset, split):
        raise ConfigError(f"{str(directory)!r} holds the certificate of {then[0]!r} on {then[1]!r} ({then[2]}), not of "
                          f"{model!r} on {dataset!r} ({split}): pass --overwrite to replace it, or choose another --output")


def _default_dataset(spec: str) -> str:
    found = default_dataset(spec)
    if found is None:
        raise ConfigError(f"model {spec!r} names no dataset (neither a built-in nor a card with 'datasets:'): name "
                          "the data to certify on (--dataset)")
    return found[0]


def _budgets(eps: float | Sequence[float]) -> tuple[float, ...]:
    values = radii(eps)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"eps: a radius must be a finite number >= 0, got {value!r}")
    if not values:
        raise ConfigError("eps lists no radius")
    return tuple(float(value) for value in values)


def _check_options(norm: str, loss: str, n: int | None, seed: int) -> None:
    for name, value, allowed in (("norm", norm, get_args(CostNorm)), ("loss", loss, get_args(CertLoss))):
        if value not in allowed:
            raise ConfigError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    for name, value, least in (("n", n, 1), ("seed", seed, 0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least):
            raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}")
    if seed is None:
        raise ConfigError("seed must be an integer >= 0, got None")
