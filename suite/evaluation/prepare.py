"""Preparation: everything that can be wrong with a task is found here, before any file is written.

:func:`prepare` builds the attacks (a bad name or hyperparameter fails before any model loads),
the model, the examples and the adversary's fitting examples, checks that attacks and model
agree and that every resource is on disk, and refuses an output directory that holds another
run. Reusable by anything that runs a task (``evaluate``, ``run``, the Python API, and the
certify command to come).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from suite.attacks import Attack, build_attack
from suite.calibration.temperature import CALIBRATION_VERSION
from suite.data.base import EvalSet, Example
from suite.data.hf_split import check_other_split
from suite.data.load import load_eval_set
from suite.errors import ConfigError, ResourceMissingError
from suite.evaluation import distributed
from suite.evaluation.batching import AUTO, fixed_size
from suite.evaluation.options import RunOptions
from suite.evaluation.precision import channels_last, check_precision, rounding_note, with_precision
from suite.evaluation.recipe import (
    DEFAULT_ATTACKS,
    DEFAULT_ENSEMBLE_ATTACKS,
    DEFAULT_TEXT_ADVERSARY,
    NO_ADVERSARY,
    AdversaryConfig,
    TaskConfig,
)
from suite.evaluation.radius import Radius, resolve_radius, vacuous_radius
from suite.evaluation.records import RecordStore, check_output_path
from suite.evaluation.scoring import SCORING_VERSION
from suite.models import Classifier, load_model, require_classes
from suite.models.card import declared_threat_model
from suite.models.ensemble import is_ensemble
from suite.models.randomized import randomized_view

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttackRun:
    """One attack under one adversary: what a results entry and its records are keyed by."""

    key: str
    base: str
    kind: str
    attack: Attack


@dataclass
class PreparedTask:
    """A task whose inputs are all validated and loaded; nothing written yet."""

    config: TaskConfig
    options: RunOptions
    model: Classifier
    eval_set: EvalSet
    attacks: dict[str, Attack]
    store: RecordStore
    adversary: AdversaryConfig = NO_ADVERSARY
    #: Labelled examples the adversary temperatures are fitted on (``None``: no cal/opt).
    fit_set: EvalSet | None = None
    opt_attack: tuple[str, Attack] | None = None
    notes: list[str] = field(default_factory=list)
    #: Where the radius of the attacks that set none came from (``None``: every one set its own).
    radius: Radius | None = None
    #: Per attack key, the examples per batch its pass ended at (``--batch-size auto`` probes,
    #: and halving after an out-of-memory error): recorded in results as ``batch_sizes``.
    batch_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        """The run seed (the dataset subsample)."""
        return self.options.seed

    @property
    def attack_seed(self) -> int:
        """The seed of every attack's per-example randomness: the task's, else the run seed."""
        return self.seed if self.config.attack_seed is None else self.config.attack_seed

    @property
    def batch_size(self) -> int | Literal["auto"]:
        """The batch size asked for: examples per attack batch, or ``auto``."""
        return self.config.batch_size or self.options.batch_size

    @property
    def fixed_batch_size(self) -> int:
        """The batch size where nothing is probed (text, CPU): :func:`~.batching.fixed_size`."""
        return fixed_size(self.batch_size, self.model.modality)

    @property
    def name(self) -> str:
        return self.config.name

    def attacked(self) -> list[Example]:
        """The examples every attack runs on: clean correctness above 0 (once the clean pass has
        recorded it), in evaluation order."""
        return [ex for ex in self.eval_set.examples if self.store.get("clean", ex.id)["correct"] > 0]

    @property
    def runs(self) -> list[AttackRun]:
        """Every (attack, adversary) pair the task runs, in results order."""
        return [
            AttackRun(AdversaryConfig.key(key, kind), key, kind, attack)
            for key, attack in self.attacks.items()
            for kind in self.adversary.kinds
            if kind == "none" or attack.searches_on_model
        ]


def prepare(task: TaskConfig, options: RunOptions, *, model: Classifier | None = None,
            eval_set: EvalSet | None = None) -> PreparedTask:
    """Build attacks, model and examples, and check the output dir, without writing anything.

    Args:
        task: What to run.
        options: Seed, batch size, output and the rest (:class:`RunOptions`).
        model: A classifier already in memory (the Python API); else ``task.model`` is loaded.
        eval_set: Examples already in memory; else ``task.dataset`` is loaded for the model.
    """
    # Attacks first: a bad name or hyperparameter, or a missing resource (torchattacks, WordNet)
    # of an attack that is not optional, fails before any model is loaded (or trained).
    attacks = {config.key: build_attack(config.name, config.params) for config in task.attacks}
    for config in task.attacks:
        if not config.optional:
            attacks[config.key].check_resources()
    if options.output is not None:  # an unwritable output is refused before a model loads (or a built-in trains)
        check_output_path(options.output)
    model = model if model is not None else load_model(task.model)
    require_classes(model)  # a caller's model (load_model checks its own)
    if model.info.threat_model is None:  # a card's (hf:/timm:) threat model: results and the radius read it
        declared = declared_threat_model(task.model.spec, task.model.revision)
        if declared is not None:
            model.info = replace(model.info, threat_model=declared)
    defaults = DEFAULT_ATTACKS[model.modality]
    if model.modality == "image" and is_ensemble(model):
        defaults = DEFAULT_ENSEMBLE_ATTACKS
    task, radius = resolve_radius(task, model, defaults)
    if options.channels_last and model.modality != "image":
        raise ConfigError(f"--channels-last applies to image models; {model.info.name!r} is a {model.modality} model")
    precision = task.precision
    task = with_precision(task, model)
    attacks = {config.key: build_attack(config.name, config.params) for config in task.attacks}
    for name, attack in attacks.items():
        if attack.modality != model.modality:
            raise ConfigError(f"attack {name!r} works on {attack.modality} but model {model.info.name!r} takes {model.modality}")
        attack.check_model(model)
    _check_gradient_path(model, attacks)
    batch_size = task.batch_size or options.batch_size
    averaged = [key for key, attack in attacks.items() if attack.loss_reduction == "mean"]
    if batch_size == AUTO and averaged:
        raise ConfigError(f"{', '.join(averaged)} average{'s' if len(averaged) == 1 else ''} the loss over the batch "
                          "(reduction: mean), so the batch size changes the numbers: give --batch-size N "
                          "(batch_size: N in a recipe) rather than auto")
    adversary = task.adversary or (DEFAULT_TEXT_ADVERSARY if model.modality == "text" else NO_ADVERSARY)
    if model.modality != "text" and adversary.kinds != ("none",):
        raise ConfigError("adversary temperatures (cal, opt, platt) apply to text attacks; image attacks here have "
                          "temperature-free losses (margin, DLR): use beta or apgd_t")
    if task.certify is not None and model.modality != "image":  # found here, before any task of a recipe runs
        raise ConfigError(f"certify works on image models (input Jacobians of [0, 1] pixels); {model.info.name!r} "
                          f"takes {model.modality}")
    notes = _check_resources(task, attacks)
    if radius is not None and radius.source == "attack defaults":
        notes.append(radius.detail)
        logger.warning("%s: %s", task.name, radius.detail)
    for key, attack in attacks.items():
        vacuous = vacuous_radius(key, attack.threat, model.input_size) if model.modality == "image" else None
        if vacuous is not None:
            notes.append(vacuous)
            logger.warning("%s: %s", task.name, vacuous)
    opt_attack = None
    if "opt" in adversary.kinds and adversary.opt_attack is not None:
        opt_attack = (adversary.opt_attack.key, build_attack(adversary.opt_attack.name, adversary.opt_attack.params))
        _check_resources(task.model_copy(update={"attacks": (adversary.opt_attack,)}), dict([opt_attack]))
    if eval_set is None:
        eval_set = load_eval_set(task.dataset, model.input_spec, options.seed)
    if not eval_set.examples:
        raise ConfigError(f"dataset {task.dataset.spec!r} split {task.dataset.split!r} has no examples")
    truncated = getattr(model, "truncated", None)
    if model.modality == "text" and truncated is not None:
        count = truncated([example.input for example in eval_set.examples])
        if count:  # one text of 17,000 words searched for an hour what the model never read
            notes.append(f"{count} of {len(eval_set.examples)} texts run past the model's {model.max_length} tokens: "
                         "the model sees only their first tokens, while the attacks search and query all their words")
            logger.warning("%s: %s", task.name, notes[-1])
    if precision not in (None, "fp32"):
        check_precision(model, precision, eval_set.examples[0])
        notes.append(rounding_note(model, precision, attacks))
        logger.warning("%s: %s", task.name, notes[-1])
    if options.channels_last:
        if model.device.type == "cuda":
            channels_last(model)
        else:
            notes.append(f"channels-last applies on CUDA; this run on the {model.device.type} is unchanged")
            logger.warning("%s: %s", task.name, notes[-1])
    # A randomized model (not an ensemble) is attacked through EOT and scored by its expected
    # accuracy (suite.models.randomized): one draw is neither its accuracy nor what attacks face.
    model, randomized = randomized_view(model, [example.input for example in eval_set.examples],
                                        options.seed if task.attack_seed is None else task.attack_seed)
    if randomized is not None:
        notes.append(randomized)
        logger.warning("%s: %s", task.name, randomized)
    fit_set = None
    if {"cal", "opt", "platt"} & set(adversary.kinds):
        if adversary.split is None:
            fit_set = eval_set
        else:
            check_other_split(task.dataset.spec, task.dataset.split, adversary.split, "--adversary-split")
            fit_config = task.dataset.model_copy(update={"split": adversary.split, "n": adversary.n})
            fit_set = load_eval_set(fit_config, model.input_spec, options.seed)
    batched = any(attack.batch_dependent for attack in attacks.values())
    identity = run_identity(task, options.seed, model, attacks, eval_set, fit_set, opt_attack,
                            batch_size=fixed_size(batch_size, model.modality) if batched else None)
    store = RecordStore(options.directory_for(task.name), identity, distributed.current())
    store.check(options.overwrite)
    return PreparedTask(task, options, model, eval_set, attacks, store, adversary, fit_set, opt_attack, notes, radius)


def _check_gradient_path(model: Classifier, attacks: dict[str, Attack]) -> None:
    """Refuse white-box attacks on an image model whose logits have no autograd path to its input
    (an input binarised or cast to integers): every gradient call raised torch's RuntimeError."""
    white = sorted(key for key, attack in attacks.items() if attack.access == "white-box")
    if model.modality != "image" or not white or model.input_size is None:
        return
    with torch.enable_grad():
        probe = torch.rand(1, *model.input_size, generator=torch.Generator().manual_seed(0)).to(model.device)
        logits = model.logits(probe.requires_grad_(True), grad=True)
    if not logits.requires_grad:
        raise ConfigError(
            f"model {model.info.name!r} gives logits with no gradient path to its input (it binarises, rounds to "
            f"integers or detaches it), so the white-box attacks {', '.join(white)} cannot run: attack it with a "
            "black-box one (--attacks square), or give it a differentiable stand-in for that step (BPDA)")


def run_identity(task: TaskConfig, seed: int, model: Classifier, attacks: dict[str, Attack], eval_set: EvalSet,
                 fit_set: EvalSet | None, opt_attack: tuple[str, Attack] | None,
                 batch_size: int | None = None) -> dict[str, Any]:
    """Everything that decides a task's numbers (batch size and process count do not): the
    configuration, a hash of the weights actually loaded (a model retrained in place, or a Hub
    model moved to a new commit, is another model), a hash of the examples actually evaluated
    (a data file edited in place is another dataset), and the versions of the scoring and of
    every attack. Records are resumed only under the same identity.

    ``batch_size``: given where an attack averages its loss over the batch (``reduction:
    mean``), whose numbers the batch size does decide; a resume at another size is then
    refused instead of mixing two sizes' records under one."""
    every = {**attacks, **dict([opt_attack] if opt_attack else [])}
    adversary = task.adversary or (DEFAULT_TEXT_ADVERSARY if model.modality == "text" else NO_ADVERSARY)
    # The fits of cal, opt and platt (suite.calibration): a run whose aware adversaries were
    # fitted otherwise is not resumed. Absent without them, so those runs keep their identity.
    fitted = {} if adversary.kinds == ("none",) else {"calibration": CALIBRATION_VERSION}
    averaged = {} if batch_size is None else {"batch_size": batch_size}
    # The device type where it is not the CPU: CUDA's arithmetic is not the CPU's, so a run is not
    # resumed on the other (cuda:0 against cuda:1, or the default against the device it resolves
    # to, is the same run). Absent on the CPU, so CPU runs keep the identity they always had.
    device_type = torch.device(model.device).type
    placed = {} if device_type == "cpu" else {"device": device_type}
    return {
        **averaged,
        **placed,
        **fitted,
        **task.identity(seed),
        "weights": model.weights_hash(),
        "examples": examples_fingerprint(eval_set),
        "fit_examples": None if fit_set is None or fit_set is eval_set else examples_fingerprint(fit_set),
        "scoring": SCORING_VERSION,
        "attack_versions": {key: f"{attack.name}/{attack.version}{_low_precision(attack)}"
                            for key, attack in sorted(every.items())},
    }


def _low_precision(attack: Attack) -> str:
    """A mark on a low-precision search's version: since it was added, a row that autocast
    calls broken stops only where float32 logits agree (:func:`suite.attacks.image.loop._confirmed`),
    so a bf16 run from before it is not resumed (fp32 runs are unchanged)."""
    return "+fp32-confirmed" if getattr(attack, "precision", "fp32") != "fp32" else ""


def examples_fingerprint(eval_set: EvalSet) -> str:
    """A content hash of the examples a task evaluates: ids, inputs and labels."""
    digest = hashlib.sha256()
    for example in eval_set.examples:
        digest.update(f"{example.id}\x00{example.label}\x00".encode())
        if isinstance(example.input, str):
            digest.update(example.input.encode("utf-8", "surrogatepass") + b"\x00")
        else:
            value = example.input.detach().to("cpu", torch.float32).contiguous()
            digest.update(str(tuple(value.shape)).encode() + value.numpy().tobytes())
    return "sha256-" + digest.hexdigest()[:16]


def _check_resources(task: TaskConfig, attacks: dict[str, Attack]) -> list[str]:
    """Fail on a missing resource, or drop an ``optional`` attack with a note (returned)."""
    notes = []
    for config in task.attacks:
        if config.key not in attacks:
            continue
        try:
            attacks[config.key].check_resources()
        except ResourceMissingError as error:
            if not config.optional:
                raise
            notes.append(f"skipped attack {config.key!r}: {error}")
            logger.warning("%s: %s", task.name, notes[-1])
            del attacks[config.key]
    return notes
