"""The public Python API: ``suite.evaluate(model, dataset, ...)`` on objects in memory or specs.

It runs exactly what ``advsuite evaluate`` runs (:func:`~suite.evaluation.prepare.prepare`, then
:func:`~suite.evaluation.runner.execute`): with ``output`` set it writes the same records,
``run.json`` and ``results.json``, and resumes the same way; without it, nothing touches the
disk. Bad input raises a :class:`~suite.errors.SuiteError` subclass whose message is the line
the CLI prints.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from torch import nn

from suite.attacks import ATTACKS
from suite.data.base import EvalSet
from suite.data.config import DatasetConfig
from suite.errors import ConfigError, format_validation_error
from suite.evaluation.options import RunOptions
from suite.evaluation.prepare import prepare
from suite.evaluation.recipe import AdversaryConfig, TaskConfig
from suite.evaluation.runner import execute
from suite.models import Classifier, ModelConfig, load_model
from suite.report.results import Results

ModelLike = str | ModelConfig | Classifier | nn.Module | tuple
DatasetLike = str | DatasetConfig | EvalSet | tuple


def evaluate(
    model: ModelLike,
    dataset: DatasetLike,
    *,
    attacks: Iterable[str | Mapping[str, Any]] | None = None,
    eps: float | Sequence[float] | None = None,
    norm: str | None = None,
    precision: str | None = None,
    n: int | None = None,
    split: str = "test",
    adversary: Sequence[str] | Mapping[str, Any] | AdversaryConfig | None = None,
    options: RunOptions | None = None,
    output: str | Path | None = None,
) -> Results | None:
    """Evaluate ``model`` on ``dataset`` under ``attacks``; the typed results.

    Args:
        model: A spec (``"builtin:digits-cnn"``, ``"hf:<id or dir>"``, ``"timm:<name or dir>"``)
            or a :class:`~suite.models.ModelConfig`; a :class:`~suite.models.Classifier`; a plain
            ``torch.nn.Module`` image classifier taking [0, 1] pixels of the dataset's size
            (use :func:`suite.models.wrap.from_module` to give its mean, std, input size or
            class names); or a ``(transformers model, tokenizer)`` pair.
        dataset: A spec (``"builtin:digits"``, ``"hf:<name or file>"``) or a
            :class:`~suite.data.config.DatasetConfig`; or in memory: ``(images, labels)`` with
            images an N×C×H×W float tensor in [0, 1], or ``(texts, labels)`` with a list of strings.
        attacks: Attack names, or mappings ``{"name": ..., <hyperparameters>}``; default: the
            modality's default attacks.
        eps: The radius of every attack that sets none, the default attacks included (each
            listed attack must take one); several radii run every attack at each (one threat
            model per radius, and a robustness curve). Unset: the threat model the model
            declares (its card; robust built-ins declare theirs), else the attacks' defaults,
            with a warning (:mod:`suite.evaluation.radius`).
        norm: ``linf`` or ``l2``: the norm of every attack that takes one and sets none (the
            default attacks included).
        precision: ``bf16`` or ``fp16``: image attacks search under autocast in it, weaker than
            in fp32 (the results warn); adversarial inputs are still scored in float32
            (:mod:`suite.evaluation.precision`). Channels-last is its own option
            (``options=RunOptions(channels_last=True)``).
        n: Evaluate a seeded subsample of n examples.
        split: Dataset split (specs only).
        adversary: Text attacks: adversary temperatures, as kinds (``["none", "cal", "opt"]``)
            or the fields of :class:`~suite.evaluation.recipe.AdversaryConfig`.
        options: Seed, batch size, overwrite, log_samples (:class:`RunOptions`); its ``output``
            is replaced by ``output`` when that is given.
        output: Directory for records, ``run.json`` and ``results.json`` (resumable); ``None``
            keeps everything in memory.

    Returns:
        The results (on the main process of a multi-process launch; ``None`` on the others).

    Raises:
        SuiteError: A subclass (``ConfigError``, ``DataError``, ``UnknownNameError``,
            ``ResourceMissingError``) with the same one-line message as the CLI.
    """
    if isinstance(attacks, Iterable) and not isinstance(attacks, (str, Mapping, list, tuple)):
        attacks = list(attacks)  # a generator: the check below would use it up
    check_arguments(attacks=attacks, eps=eps, n=n, options=options, output=output, adversary=adversary, split=split)
    attacks, adversary = _one_or_many(attacks), _one_or_many(adversary)
    n = None if n is None else int(n)  # numpy's integers too
    eps = float(eps) if isinstance(eps, numbers.Real) else None if eps is None else [float(value) for value in eps]
    options = options or RunOptions()
    if output is not None:
        options = replace(options, output=Path(output))
    if options.command is None:
        options = replace(options, command="suite.evaluate(...)")
    from suite.models.wrap import lent

    with lent(model):  # the caller's model in eval mode for the run, and as it was after
        classifier, model_config = resolve_model(model, dataset)
        classifier, eval_set, dataset_config = resolve_data(dataset, classifier, model_config, split=split, n=n,
                                                            seed=options.seed)
        try:
            task = TaskConfig(name="evaluate", model=model_config, dataset=dataset_config,
                              attacks=attack_configs(attacks, eps), eps=radii(eps), norm=norm,
                              precision=precision, adversary=_adversary(adversary))
        except ValidationError as error:
            raise ConfigError(format_validation_error(error)) from error
        return execute(prepare(task, options, model=classifier, eval_set=eval_set))


def attack_configs(attacks: Iterable[str | Mapping[str, Any]] | None, eps: float | Sequence[float] | None = None,
                   flag: str = "eps") -> list[dict[str, Any]]:
    """Attack entries of a task. With ``eps`` given, every named attack must take a radius: the
    ones that do not are refused, all named in one line. (The radius itself goes to the task,
    :func:`radii`: :mod:`suite.evaluation.radius` sets it on every attack that sets none.)"""
    configs = [{"name": item} if isinstance(item, str) else dict(item) for item in attacks or ()]
    if eps is not None:
        no_radius = [str(config.get("label") or config.get("name")) for config in configs
                     if "eps" not in ATTACKS.get(str(config.get("name"))).model_fields]
        if no_radius:
            raise ConfigError(f"{flag} does not apply to {', '.join(no_radius)}: "
                              f"{'it takes' if len(no_radius) == 1 else 'they take'} no radius")
    return configs


def radii(eps: float | Sequence[float] | None, flag: str = "eps") -> tuple[float, ...]:
    """``eps`` as the task's tuple of radii (several run every attack at each, labelled
    ``<attack>-eps<ε>``: each radius is its own threat model, with its own worst case)."""
    values = () if eps is None else (eps,) if isinstance(eps, numbers.Real) else tuple(eps)
    # numpy's and torch's scalars as Python floats (the task's radii take numbers, not booleans);
    # a narrower float (np.float32(0.03)) as the decimal it shows, 0.03, not 0.029999999329447746:
    # the same radius in float32 arithmetic, and the same run (label, identity) as --eps 0.03.
    values = tuple((float(str(v)) if getattr(getattr(v, "dtype", None), "itemsize", 8) < 8 else float(v))
                   if isinstance(v, numbers.Real) and not isinstance(v, bool) else v for v in values)
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} lists a radius twice")
    return values


def resolve_model(model: ModelLike, dataset: DatasetLike | None,
                  device: str | None = None) -> tuple[Classifier | None, ModelConfig]:
    """The classifier already in memory (or ``None``: the caller loads the spec) and its config.

    Args:
        model: Any form :func:`evaluate` takes.
        dataset: The data it runs on (a plain ``nn.Module`` reads its input size from the images).
        device: Where a spec or a plain module runs (``None``: the config's own, else CUDA when
            present); a :class:`Classifier` stays where it is.
    """
    if isinstance(model, str):
        try:
            return None, ModelConfig(spec=model, device=device)
        except ValidationError as error:
            raise ConfigError(format_validation_error(error)) from error
    if isinstance(model, ModelConfig):
        return None, model if device is None else _with_device(model, device)
    if isinstance(model, tuple) and len(model) == 2:
        from suite.models.wrap import from_transformers

        classifier = from_transformers(*model, device=device)
    elif isinstance(model, nn.Module):
        from suite.models.wrap import from_module

        images = dataset[0] if isinstance(dataset, tuple) and len(dataset) == 2 else None
        if not isinstance(images, torch.Tensor) or images.ndim != 4:
            raise ConfigError("a plain nn.Module needs its input size: pass images as an N×C×H×W tensor, or wrap it "
                              "with suite.models.wrap.from_module(module, input_size=...)")
        classifier = from_module(model, input_size=tuple(images.shape[1:]), device=device)
    elif isinstance(model, Classifier):
        classifier = model
    else:
        raise ConfigError(f"model must be a spec, a Classifier, an nn.Module or a (transformers model, tokenizer) pair, "
                          f"not {type(model).__name__}")
    info = classifier.info
    # An ensemble built in memory is not a loadable ensemble: spec (whose members are names, not specs).
    loadable = ":" in info.spec.strip(":") and not info.spec.startswith("ensemble:")
    spec = info.spec if loadable else f"memory:{info.spec or type(classifier).__name__}"
    return classifier, ModelConfig(spec=spec, revision=info.revision, temperature=info.temperature)


def _with_device(config: ModelConfig, device: str) -> ModelConfig:
    try:  # validated as a field: a bad device name is one line, as for a spec
        return ModelConfig.model_validate({**config.model_dump(exclude_unset=True), "device": device})
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from error


def resolve_data(dataset: DatasetLike, classifier: Classifier | None, model_config: ModelConfig, *, split: str,
                 n: int | None, seed: int) -> tuple[Classifier | None, EvalSet | None, DatasetConfig]:
    """The examples already in memory (or ``None``: the caller loads the config) and their config.

    In-memory data is checked against the model, so a model given as a spec is loaded here
    (returned with them); a dataset spec leaves both to the caller.
    """
    if isinstance(dataset, (str, DatasetConfig)):
        try:
            config = DatasetConfig(spec=dataset) if isinstance(dataset, str) else dataset
            config = config.model_copy(update={"split": split if isinstance(dataset, str) else config.split,
                                               "n": n if n is not None else config.n})
        except ValidationError as error:
            raise ConfigError(format_validation_error(error)) from error
        return classifier, None, config
    if classifier is None:
        classifier = load_model(model_config)
    eval_set = _in_memory(dataset, classifier, n, seed)
    return classifier, eval_set, DatasetConfig(spec=f"memory:{eval_set.fingerprint}", split=eval_set.split, n=n)


def _in_memory(dataset: DatasetLike, classifier: Classifier, n: int | None, seed: int) -> EvalSet:
    from suite.data.memory import in_memory_eval_set
    from suite.data.load import subsample_indices

    if isinstance(dataset, EvalSet):
        if n is None:
            return dataset
        rows = subsample_indices(len(dataset.examples), n, seed)
        return replace(dataset, examples=[dataset.examples[row] for row in rows])
    if not (isinstance(dataset, tuple) and len(dataset) == 2):
        raise ConfigError("dataset must be a spec, a DatasetConfig, or an (inputs, labels) pair")
    return in_memory_eval_set(dataset[0], dataset[1], classifier.input_spec, n=n, seed=seed)


def _adversary(adversary: Sequence[str] | Mapping[str, Any] | AdversaryConfig | None) -> Any:
    if adversary is None or isinstance(adversary, (AdversaryConfig, Mapping)):
        return adversary
    return {"kinds": list(adversary)}


def check_arguments(**given: Any) -> None:
    """Refuse, in one line, a keyword of the Python API of the wrong kind: it failed deep inside
    (a TypeError, numpy's error), or meant something else silently (``n=-1`` evaluated all but
    one example, ``attacks="pgd_linf"`` the attacks ``p``, ``g``, ``d``..., ``eps=True`` ε = 1)."""
    def number(value: Any) -> bool:  # numpy's scalars too
        return isinstance(value, numbers.Real) and not isinstance(value, bool)

    for name, value in given.items():
        if value is None:
            continue
        if name in ("n", "limit") and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise ConfigError(f"{name} must be a whole number >= 1 (None: every example), not {value!r}")
        if name == "eps" and not (number(value) or (isinstance(value, Sequence) and not isinstance(value, str)
                                                    and value and all(number(item) for item in value))):
            raise ConfigError(f"eps must be a number or a non-empty list of numbers, not {value!r}")
        if name == "attacks" and not (isinstance(value, str) or (
                isinstance(value, Iterable) and not isinstance(value, Mapping)
                and all(isinstance(item, (str, Mapping)) for item in value))):
            raise ConfigError(f"attacks must be attack names or {{'name': ...}} mappings, not {value!r}")
        if name == "options" and not isinstance(value, RunOptions):
            raise ConfigError(f"options must be a suite.RunOptions, not {type(value).__name__}")
        if name == "output" and (not isinstance(value, (str, Path)) or not str(value)):
            raise ConfigError(f"output must be a directory path (None: in memory), not {value!r}")
        if name == "split" and (not isinstance(value, str) or not value):
            raise ConfigError(f"split must be a split's name, not {value!r}")


def _one_or_many(value: Any) -> Any:
    """A single name as a list of one (``attacks="pgd_linf"``, ``adversary="cal"``)."""
    return [value] if isinstance(value, str) else value
