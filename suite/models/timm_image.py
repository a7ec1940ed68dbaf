"""timm image classifiers: ``timm:<model name>`` or ``timm:<local dir>``.

- ``timm:resnet18.a1_in1k`` builds the architecture with ``timm.create_model``; ``pretrained``
  fetches its weights from the Hub, ``checkpoint`` loads a safetensors file instead (its class
  count read from the classifier's weights unless ``num_classes`` is given).
- ``timm:<dir>`` loads a directory in timm's Hub layout (``config.json`` with ``architecture``,
  ``num_classes``, ``pretrained_cfg``; weights in ``model.safetensors``), as written by
  :func:`suite.models.timm_dir.save_timm_dir` and by timm's own ``save_for_hf``.

The pretrained config supplies mean, std and input size. Normalisation happens inside the
wrapper, so attacks see (and perturb) [0, 1] pixels.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from suite.data.base import SUITE_PREPROCESSING, Preprocessing
from suite.errors import ConfigError, first_line
from suite.models.base import ModelInfo, TorchClassifier, local_revision, resolve_device, state_key
from suite.models.config import ModelConfig
from suite.models.hub_access import timm_weights_offline
from suite.models.timm_dir import WEIGHTS_FILE, read_dir_config
from suite.models.weights import local_dir, pickled_files, read_state_dict, refuse_pickle, timm_without_pickles


class TimmImageClassifier(TorchClassifier):
    """A timm model fed [0, 1] pixels; mean/std normalisation is applied inside.

    Args:
        model: The timm model (any ``nn.Module`` mapping normalised N×C×H×W to logits).
        mean: Per-channel mean of the model's normalisation.
        std: Per-channel standard deviation.
        input_size: (channels, height, width) the model expects.
        labels: Class names.
        info: Identity recorded in results.
        preprocessing: How an image of another size is resized and cropped to ``input_size``
            (timm's ``crop_pct``, ``interpolation`` and ``crop_mode``).
    """

    modality = "image"

    def __init__(
        self,
        model: nn.Module,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        input_size: tuple[int, int, int],
        labels: list[str],
        info: ModelInfo,
        device: torch.device | str | None = None,
        preprocessing: Preprocessing = SUITE_PREPROCESSING,
    ) -> None:
        super().__init__(model, device)
        self.preprocessing = preprocessing
        channels = input_size[0]
        self.mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)
        self.input_size = tuple(int(v) for v in input_size)
        self.labels = labels
        self.info = info

    def lipschitz_bound(self) -> tuple[float | None, str]:
        from suite.models.lipschitz import network_bound

        return network_bound(self.module, self.input_size, self.std.flatten().tolist())

    def relu_cell(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        from suite.models.lipschitz import relu_cell

        return relu_cell(self.module, x, self.mean.flatten().tolist(), self.std.flatten().tolist())

    def cell_support(self) -> str | None:
        from suite.models.lipschitz import cell_support

        return cell_support(self.module)

    def float64_logits(self, batch: torch.Tensor) -> torch.Tensor | None:
        """The logits in float64 on the CPU, from a float64 copy of the module made on first use (and again
        after a weight changes; ``None`` when the module cannot run in float64)."""
        # Made again when a weight changed (state_key): the copy of weights changed in place since
        # gave a certificate the old model's loss beside the new model's bound.
        key = state_key(self.module)
        twin, made_for = getattr(self, "_float64_twin", (None, None))
        if twin is None or made_for != key:
            import copy

            try:
                twin = copy.deepcopy(self.module).to("cpu", torch.float64)
            except (RuntimeError, TypeError):  # a module that cannot be copied or cast
                return None
            self._float64_twin = (twin, key)
        inputs = batch.detach().to("cpu", torch.float64)
        mean, std = self.mean.to("cpu", torch.float64), self.std.to("cpu", torch.float64)
        try:
            with torch.no_grad():
                logits = twin((inputs - mean) / std)
        except RuntimeError:  # an operation without a float64 kernel
            return None
        return logits.double() if logits.dtype == torch.float64 else None

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.ndim != 4 or tuple(batch.shape[1:]) != self.input_size:
            raise ValueError(f"expected images of shape N×{'×'.join(map(str, self.input_size))}, got {tuple(batch.shape)}")
        batch = batch.to(self.device, torch.float32)
        return self.module((batch - self.mean) / self.std)


def _labels_for(num_classes: int, names: list[str] | None) -> list[str]:
    if names and len(names) == num_classes:
        return [str(name) for name in names]
    if num_classes == 1000:
        try:
            from timm.data import ImageNetInfo

            return list(ImageNetInfo().label_names())
        except Exception:  # older timm without ImageNetInfo: fall back to indices
            pass
    return [f"class_{i}" for i in range(num_classes)]


def _build(name: str, pretrained: bool, allow_pickle: bool = False, **kwargs: Any) -> nn.Module:
    import timm

    try:
        with contextlib.nullcontext() if allow_pickle or not pretrained else timm_without_pickles(name):
            return timm.create_model(name, pretrained=pretrained, **kwargs)
    except ConfigError:
        raise
    except RuntimeError as error:  # timm: "Unknown model (xyz)"
        message = first_line(error)
        if "Unknown model" in message:
            close = timm.list_models(f"*{name.split('.')[0][:6]}*")[:5]
            hint = f" Similar: {', '.join(close)}." if close else ""
            raise ConfigError(f"unknown timm model {name!r}.{hint} See timm.list_models().") from error
        raise ConfigError(f"cannot build timm model {name!r}: {message}") from error
    except OSError as error:  # weights not reachable (offline, no cache)
        raise ConfigError(f"cannot fetch pretrained weights for timm model {name!r}: {first_line(error)}") from error
    except (TypeError, ValueError, AssertionError, KeyError) as error:  # arguments the architecture rejects
        raise ConfigError(f"cannot build timm model {name!r} with arguments {kwargs!r}: {first_line(error)}") from error


def _head_keys(model_or_name: nn.Module | str) -> list[str]:
    """The classifier's weight names (timm's ``pretrained_cfg['classifier']`` names the head)."""
    if isinstance(model_or_name, str):
        from timm.models import get_pretrained_cfg

        cfg = get_pretrained_cfg(model_or_name)
        classifier = cfg.classifier if cfg is not None else None
    else:
        classifier = getattr(model_or_name, "pretrained_cfg", {}).get("classifier")
    heads = classifier if isinstance(classifier, (list, tuple)) else [classifier] if classifier else []
    return [f"{head}.{part}" for head in heads for part in ("weight", "bias")]


def _checkpoint_classes(name: str, state: dict[str, torch.Tensor]) -> int | None:
    """The class count of a checkpoint for architecture ``name``: its classifier's output rows."""
    for key in _head_keys(name):
        tensor = state.get(key)
        if tensor is not None and tensor.ndim >= 1:
            return int(tensor.shape[0])
    return None


def _fit(model: nn.Module, state: dict[str, torch.Tensor], what: str, target: str, classes_hint: str) -> None:
    """Load ``state`` into ``model`` strictly, or say in one line the mismatch that matters.

    Args:
        what: The weights, as named in the error (``checkpoint 'x.safetensors'``).
        target: The model, as named in the error (``timm:resnet18``).
        classes_hint: What to do when the classifier's size differs, with ``{n}`` for the
            checkpoint's class count (``pass --num-classes {n}``).
    """
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    heads = _head_keys(model)
    wrong = [key for key in expected if key in state and tuple(state[key].shape) != expected[key]]
    wrong.sort(key=lambda key: key not in heads)  # the head first: its size is the usual cause
    if wrong:
        key = wrong[0]
        stored = tuple(state[key].shape)
        message = f"{what} does not fit {target}: {key} has shape {stored} in the checkpoint, {expected[key]} in the model"
        if key in heads and stored:
            message += "; " + classes_hint.format(n=stored[0])
        elif len(wrong) > 1:
            message += f" ({len(wrong)} tensors differ: was it saved from another architecture?)"
        raise ConfigError(message)
    kinds = {key: value.is_floating_point() for key, value in model.state_dict().items()}
    cast = [key for key in expected if key in state and kinds[key] and not state[key].is_floating_point()]
    if cast:  # int32 or bool tensors copied into float weights: a model of garbage, scored 0 % silently
        held = str(state[cast[0]].dtype).removeprefix("torch.")
        raise ConfigError(f"{what} does not fit {target}: {cast[0]} holds {held} values where the model has "
                          "floating-point weights")
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    if missing or unexpected:
        kinds = (("missing", missing), ("unexpected", unexpected))
        examples = ", ".join(f"{label} {keys[0]!r}" for label, keys in kinds if keys)
        raise ConfigError(f"{what} does not fit {target}: {len(missing)} tensors missing, {len(unexpected)} "
                          f"unexpected (e.g. {examples}): was it saved from another architecture?")
    model.load_state_dict(state, strict=True)


def load_timm(name: str, config: ModelConfig) -> TimmImageClassifier:
    """Build a timm classifier from a model name (optionally with a checkpoint) or a local dir."""
    resolve_device(config.device)  # a bad device fails before any weights are read
    directory = local_dir("timm", name)
    if directory is None and config.checkpoint is None and config.revision is not None:  # before any download
        raise ConfigError(f"revision {config.revision!r} does not apply to 'timm:{name}': timm loads a model name's "
                          "weights at their own revision, and it would be ignored: drop --revision")
    if directory is not None:
        return _load_timm_dir(directory, config, name)
    return _load_timm_name(name, config)


def _load_timm_name(name: str, config: ModelConfig) -> TimmImageClassifier:
    from timm.data import resolve_model_data_config

    checkpoint = Path(config.checkpoint).expanduser() if config.checkpoint else None
    if checkpoint is None and config.num_classes is not None and config.pretrained:
        raise ConfigError(f"--num-classes {config.num_classes} without --checkpoint would give timm:{name} an "
                          "untrained classifier head: pass --checkpoint, or --no-pretrained for random weights")
    state = read_state_dict(checkpoint, config.allow_pickle) if checkpoint else None
    num_classes = config.num_classes or (_checkpoint_classes(name, state) if state else None)
    pretrained = config.pretrained and checkpoint is None
    kwargs: dict[str, Any] = {"num_classes": num_classes} if num_classes else {}
    if pretrained and (cached := timm_weights_offline(name, config.allow_pickle)) is not None:
        kwargs["pretrained_cfg_overlay"] = cached  # the cache's copy, not minutes of retries
    model = _build(name, pretrained=pretrained, allow_pickle=config.allow_pickle, **kwargs)
    if state is not None:
        _fit(model, state, f"checkpoint {str(checkpoint)!r}", f"timm:{name}", "pass --num-classes {n}")
    data_config = resolve_model_data_config(model)
    preprocessing = _preprocessing(data_config, f"timm:{name}'s pretrained_cfg")
    info = ModelInfo(spec=f"timm:{name}", revision=local_revision(checkpoint) if checkpoint else None,
                     extra={"checkpoint": config.checkpoint, "preprocessing": preprocessing.as_dict()})
    return TimmImageClassifier(
        model,
        mean=tuple(data_config["mean"]),
        std=tuple(data_config["std"]),
        input_size=tuple(data_config["input_size"]),
        labels=_labels_for(model.num_classes, None),
        info=info,
        device=config.device,
        preprocessing=preprocessing,
    )


def _preprocessing(data_config: dict[str, Any], where: str) -> Preprocessing:
    """timm's evaluation geometry from a resolved data config (timm's defaults where it has none)."""
    preprocessing = Preprocessing(crop_pct=data_config.get("crop_pct") or TIMM_CROP_PCT,
                                  interpolation=data_config.get("interpolation") or "bicubic",
                                  crop_mode=data_config.get("crop_mode") or "center")
    if (problem := preprocessing.problem()) is not None:
        raise ConfigError(f"{where}: {problem}")
    return preprocessing


#: timm's ``DEFAULT_CROP_PCT``: what it crops where a model's config says nothing.
TIMM_CROP_PCT = 0.875


def _dir_weights(directory: Path, config: ModelConfig) -> Path:
    """The weights file a timm dir is loaded from: ``--checkpoint``, else ``model.safetensors``."""
    if config.checkpoint:
        return Path(config.checkpoint).expanduser()
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        pickles = pickled_files(directory)
        if pickles and not config.allow_pickle:
            raise refuse_pickle(pickles[0], "timm model weights")
        if not pickles:
            raise ConfigError(f"timm model directory {str(directory)!r} holds no weights ({WEIGHTS_FILE})")
        path = next((p for p in pickles if p.name == "pytorch_model.bin"), pickles[0])
    return path


def _load_timm_dir(directory: Path, config: ModelConfig, name: str) -> TimmImageClassifier:
    """``name`` (as given: ``./m/``) is the spec the run records; a ``Path`` drops ``./`` and a
    trailing slash, and the results' spec then disagreed with ``run.json``'s, so that ``leaderboard
    add`` and ``export`` refused a genuine run as changed."""
    meta = read_dir_config(directory)
    if config.num_classes is not None and meta.num_classes not in (None, config.num_classes):
        raise ConfigError(f"--num-classes {config.num_classes} disagrees with num_classes {meta.num_classes} in "
                          f"{str(directory / 'config.json')!r}: drop --num-classes")
    weights = _dir_weights(directory, config)
    state = read_state_dict(weights, config.allow_pickle, what="weights")
    kwargs = meta.build_kwargs()
    num_classes = config.num_classes or _checkpoint_classes(meta.architecture, state)
    if num_classes is not None:
        kwargs.setdefault("num_classes", num_classes)  # config.json's own (or model_args') count comes first
    model = _build(meta.architecture, pretrained=False, **kwargs)
    hint = ("pass --num-classes {n}" if meta.num_classes is None else
            f"set num_classes to {{n}} in {str(directory / 'config.json')!r}")
    _fit(model, state, f"weights {str(weights)!r}", f"timm:{directory} ({meta.architecture})", hint)
    if meta.label_names is not None and len(meta.label_names) != model.num_classes:
        raise ConfigError(f"{str(directory / 'config.json')!r}: label_names has {len(meta.label_names)} names for "
                          f"{model.num_classes} classes")
    preprocessing = _preprocessing(meta.pretrained_cfg.model_dump(), repr(str(directory / "config.json")))
    info = ModelInfo(
        spec=f"timm:{name}", revision=local_revision(weights if config.checkpoint else directory),
        extra={"architecture": meta.architecture, "preprocessing": preprocessing.as_dict()}
        | ({"model_args": meta.model_args} if meta.model_args else {}),
    )
    channels = meta.channels
    # Where config.json gives none: timm's own (ImageNet's) for 3 channels, as timm.create_model
    # ("local-dir:...") normalises (0.5 before 2026-11-30); timm has none for other counts.
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    mean, std = (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD) if channels == 3 else ((0.5,) * channels,) * 2
    return TimmImageClassifier(
        model,
        mean=meta.pretrained_cfg.mean or tuple(mean),
        std=meta.pretrained_cfg.std or tuple(std),
        input_size=meta.input_size,
        labels=_labels_for(model.num_classes, meta.label_names),
        info=info,
        device=config.device,
        preprocessing=preprocessing,
    )
