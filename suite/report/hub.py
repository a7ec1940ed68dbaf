"""Hub-native results: a run's ``results.json`` as model card metadata and ``.eval_results`` files.

:func:`export` writes the results of one model (a run directory, or a recipe's output directory
whose tasks all evaluated it) into a directory, optionally pushed to its Hub repo (the formats,
with examples: docs/publishing.md):

- ``README.md``: the card's ``model-index``, built with huggingface_hub's ``EvalResult`` and
  ``ModelCard``: metrics ``accuracy`` (clean), ``robust_accuracy`` (per attack),
  ``worst_case_robust_accuracy`` (per threat model), ``distributional_accuracy``, each with a
  ``config`` naming attack and threat and ``args`` holding the typed threat, n, seed, interval and
  ``advsuite: <version>``, which marks advsuite's results: a merge replaces only those (same model,
  task, dataset config and split, metric) and keeps every other result, metadata key and the text.
- ``.eval_results/advsuite-<dataset>[-<config>]-<split>.yaml``, the Hub's format of
  https://huggingface.co/docs/hub/eval-results as specified in
  https://github.com/huggingface/hub-docs/blob/main/eval_results.yaml (hub-docs 242f4a1, 2026-08):
  a list of ``{dataset: {id, task_id, revision?}, value, verifyToken?, date?, source?: {url,
  name?, user?, org?}, notes?}`` where ``dataset.id`` is a Hub dataset (so only ``hf:`` datasets
  get the file). huggingface_hub >= 1.4 serialises it (``EvalResultEntry``); with an older one
  (transformers < 5 needs < 1.0) the same dicts are built here. One entry per metric, ``task_id``
  ``[<config>/]<split>/<metric>[/<threat>[/<attack>]]``; entries of another task_id are kept.

Numbers are copied, never rounded. A push uploads only the files written, after reading the
repo's copy of any the directory lacks, so what is on the Hub is merged into, not replaced.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from suite.errors import ConfigError
from suite.paths import atomic_write_text, lock_directory, through_link
from suite.report.hub_remote import check_repo_id, read_hub, upload
from suite.report.hub_merge import merge_card, merge_entries
from suite.report.hub_yaml import card_text, dump as dump_yaml, problem as yaml_problem
from suite.report.leaderboard_schema import LONGEST_NOTE, MOST_NOTES
from suite.report.results_file import read_results
from suite.report.results import Results
from suite.text import printable

CARD = "README.md"
#: The warning an export adds to results that were not beside their run's records and identity.
UNVERIFIED = ("unverified: exported from a results.json without its run's records.jsonl and run.json beside it, so "
              "its numbers were checked only against each other, not against the run's per-example records")
EVAL_DIR = ".eval_results"
TASKS = {"image": "image-classification", "text": "text-classification"}
#: A dataset spec ``hf:<name>`` names a Hub dataset unless it names a local file or directory.
_LOCAL = re.compile(r"^[.~/]|\.(csv|tsv|json|jsonl|parquet)$", re.IGNORECASE)
#: Characters Markdown gives a meaning to (``<``, ``>`` and ``&`` are escaped as HTML first).
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()!|~])")


@dataclass(frozen=True)
class Score:
    """One number of a results file: its metric type, ``config`` (which one: ``clean``,
    ``pgd_linf, linf eps=0.03``), name in words, value, ``args`` (threat, n, seed, interval) and
    ``path``, the ``task_id`` tail naming it (``robust_accuracy/linf-eps0.03/pgd_linf``)."""

    metric: str
    config: str
    name: str
    value: float
    args: dict[str, Any]
    path: str


@dataclass(frozen=True)
class Exported:
    """What :func:`export` did: files written (relative to ``directory``), and the commit URL."""

    directory: Path
    files: list[str]
    skipped: list[str]
    commit_url: str | None = None


def read_run(path: Path) -> list[Results]:
    """The results of a run directory, a ``results.json``, or a recipe's output directory (one
    sub-directory per task), all of one model (a card describes one model)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{str(path)!r} does not exist: give a run directory or its results.json")
    if path.is_file() or (path / "results.json").is_file():
        files = [path if path.is_file() else path / "results.json"]
    else:
        files = sorted(sub for sub in path.glob("*/results.json") if sub.is_file())
        if not files:
            raise ConfigError(f"{str(path)!r} holds no results.json (nor do its sub-directories): run `advsuite "
                              "evaluate --output DIR` or `advsuite run` first")
    from suite.report.compare import check_reproduced

    results = [read_results(file) for file in files]
    for at, (file, result) in enumerate(zip(files, results)):  # never publish numbers the run's records do not give
        verified = check_reproduced(file, result)
        _check_sizes(file, result)
        if not verified:  # shared alone: checked against itself only, and the card says so
            results[at] = result.model_copy(update={"warnings": [*result.warnings, UNVERIFIED]})
    models = sorted({result.model.name for result in results})
    if len(models) > 1:
        raise ConfigError(f"{str(path)!r} holds results of {len(models)} models ({', '.join(models)}); a model card "
                          "describes one: export each task directory (RUN_DIR/<task>) to its own --to")
    return results


def scores(results: Results) -> list[Score]:
    """Clean accuracy, each attack, the worst case per threat model, each distributional attack."""
    common: dict[str, Any] = {"advsuite": results.suite_version, "model": results.model.name,
                              **({"weights": results.model.weights} if results.model.weights else {}),
                              **({"revision": results.model.revision} if results.model.revision else {}),
                              "n": results.dataset.n, "seed": results.seed, "recipe": results.config_hash,
                              **({"dataset_fingerprint": fingerprint}
                                 if (fingerprint := results.dataset.fingerprint) is not None else {}),
                              **({"attack_seed": seed} if (seed := results.config.get("attack_seed")) is not None else {})}
    if results.illusion is not None and results.illusion.flagged:  # an export drops no flag and no warning
        illusion = results.illusion
        common["illusion_of_robustness"] = {"max_drop": illusion.max_drop, "mechanism": illusion.mechanism}
    if results.warnings:
        common["warnings"] = list(results.warnings)
    found = [Score("accuracy", "clean", "clean accuracy", results.clean_accuracy,
                   _args(common, results.clean_accuracy_ci), "accuracy")]
    for key, entry in results.attacks.items():
        label = entry.threat.label
        found.append(Score("robust_accuracy", f"{key}, {label}", f"robust accuracy ({key}, {label})",
                           entry.robust_accuracy, _args(common, entry.robust_accuracy_ci, entry.threat,
                                                        attack=entry.attack or key, access=entry.access),
                           f"robust_accuracy/{_slug(label)}/{_slug(key)}"))
    for label, group in results.threat_models.items():
        found.append(Score("worst_case_robust_accuracy", f"worst case, {label}",
                           f"worst-case robust accuracy ({label}; over {', '.join(group.attacks)})",
                           group.worst_case_robust_accuracy,
                           _args(common, group.worst_case_robust_accuracy_ci, group.threat,
                                 attacks=list(group.attacks)),
                           f"worst_case_robust_accuracy/{_slug(label)}"))
    for key, entry in results.distributional.items():
        label = entry.threat.label
        found.append(Score("distributional_accuracy", f"{key}, {label}", f"accuracy under {key} ({label})",
                           entry.accuracy, _args(common, None, entry.threat, attack=entry.attack or key),
                           f"distributional_accuracy/{_slug(label)}/{_slug(key)}"))
    return found


def model_card(runs: list[Results], existing: str | None, source: str = CARD, replace: bool = False) -> str:
    """The card ``existing`` (``None``: a new one; ``source`` names it) with the runs' results
    merged into its ``model-index`` (:func:`~suite.report.hub_merge.merge_card`)."""
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    # One evaluation per group, also among the runs given (a seed sweep's replicates are refused).
    new = merge_card([], [result for run in runs for result in _eval_results(run)], replace, source)
    if existing is None:
        name = runs[0].model.name
        # The heading is Markdown the Hub renders as HTML, and a terminal shows as is: control and
        # bidi characters escaped (suite.text.printable), then HTML, then Markdown (a name such as
        # [x](https://...) is no link); the YAML above escapes its own.
        heading = _MARKDOWN.sub(r"\\\1", html.escape(printable(name), quote=False))
        return card_text(ModelCard(
            f"---\n{ModelCardData(model_name=name, eval_results=new).to_yaml()}\n---\n\n# {heading}\n\n"
            "Adversarial robustness measured with advsuite: see the `model-index` metadata above "
            "and `.eval_results/`, exported from the run's results.json by `advsuite export`.\n"))
    existing = existing.removeprefix("\ufeff")  # a BOM hid the front matter: a second block went on top
    match = REGEX_YAML_BLOCK.search(existing)
    refuse = f"{source} has metadata advsuite cannot read ({{}}); fix it, or export to another --to (it is not " \
             "overwritten)"
    if match is None and existing.lstrip().startswith("---"):  # its metadata would have become text
        raise ConfigError(refuse.format("its front matter opens with --- but is never closed"))
    try:
        raw = yaml.safe_load(match.group(2)) if match else None
    except yaml.YAMLError as error:
        raise ConfigError(refuse.format(yaml_problem(error, existing[:match.start(2)].count("\n")))) from error
    except RecursionError as error:
        raise ConfigError(refuse.format("it is nested too deeply")) from error
    index = raw.get("model-index") if isinstance(raw, dict) else None
    if isinstance(index, list) and len({str(item.get("name")) for item in index if isinstance(item, dict)}) > 1:
        raise ConfigError(refuse.format("its model-index names several models; huggingface_hub keeps only one"))
    try:  # (a card with no metadata: the library says so in a log line of its own)
        card = ModelCard(existing) if match else ModelCard(f"---\n{{}}\n---\n{existing}")
    except (ValueError, TypeError, AttributeError) as error:
        # The library's message ends in advice for its own API: cut it.
        reason = " ".join(str(error).split()).split(" Pass `ignore_metadata_errors")[0]
        raise ConfigError(refuse.format(reason)) from error
    card.data.model_name = card.data.model_name or runs[0].model.name
    card.data.eval_results = merge_card(card.data.eval_results or [], new, replace, source)
    return card_text(card)


def eval_results_files(runs: list[Results], existing: dict[str, tuple[str, str]],
                       replace: bool = False) -> dict[str, str]:
    """``.eval_results/*.yaml`` path → text for the runs on Hub datasets, merged into ``existing``
    (path → its current text and where that is from)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        hub_id = hub_dataset(run)
        if hub_id is None:
            continue
        path = eval_results_path(run)
        files.setdefault(path, []).extend(_entries(run, hub_id))
    texts = {}
    for path, entries in files.items():
        text, source = existing.get(path, ("", path))
        old = _read_entries(source, text)
        texts[path] = dump_yaml(merge_entries(old, entries, runs[0].model.weights, replace, source))
    return texts


def hub_dataset(run: Results) -> str | None:
    """The Hub id of the run's dataset, ``None`` for a built-in or local one: a path, a folder
    the run fingerprinted by its bytes (``sha256-``, a local file or folder of tables), a name
    that exists here as a path, or no valid Hub id. A local folder named like a Hub dataset
    (``hf:myorg/digits``) put its numbers on that dataset's page."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    scheme, _, name = run.dataset.spec.partition(":")
    if scheme != "hf" or not name or _LOCAL.search(name) or (run.dataset.fingerprint or "").startswith("sha256-"):
        return None
    try:
        validate_repo_id(name)
        if Path(name).expanduser().exists():
            return None
    except (HFValidationError, OSError):  # OSError: a name too long for a path
        return None
    return name


def _dataset_name(run: Results) -> str:
    """The card's name of the run's dataset: its Hub id, a built-in's spec, or a local one's
    file or folder name (its path would publish the machine's directories)."""
    hub_id = hub_dataset(run)
    if hub_id is not None:
        return hub_id
    scheme, _, name = run.dataset.spec.partition(":")
    return run.dataset.spec if scheme != "hf" else f"local:{Path(name).name or name}"


def eval_results_path(run: Results) -> str:
    config = run.dataset_setting("config")
    parts = [run.dataset.spec.partition(":")[2], *([config] if config else []), run.dataset.split]
    return f"{EVAL_DIR}/advsuite-{'-'.join(_slug(part) for part in parts)}.yaml"


def export(run_dir: Path, to: Path, push: str | None = None, create_pr: bool = False,
           replace: bool = False) -> Exported:
    """Convert ``run_dir``'s results into ``to`` (created if needed) and optionally push them.

    Everything is read and checked before anything is written; the files are written atomically.

    Args:
        run_dir: A run directory, its results.json, or a recipe's output directory (one model).
        to: Directory of the model card and ``.eval_results/`` (a local copy of the model repo).
        push: Hub model repo to upload the written files to (``None``: nothing leaves the machine).
        create_pr: Open a pull request on ``push`` instead of committing to its main branch.
        replace: Replace results of another evaluation (another n, seed, dataset or recipe)
            exported before for the same model, dataset split and threat (refused otherwise).
    """
    if push is not None:
        check_repo_id(push)
    runs = read_run(run_dir)
    if to.exists() and not to.is_dir():
        raise ConfigError(f"--to {str(to)!r} is a file: name the directory of the card (created if needed)")
    for where, kind in ((to / CARD, "a file"), (to / EVAL_DIR, "a directory")):
        if where.exists() and where.is_dir() != (kind == "a directory"):
            raise ConfigError(f"--to {str(to)!r}: {str(where)!r} exists and is not {kind}")
    names = [CARD, *sorted({eval_results_path(run) for run in runs if hub_dataset(run) is not None})]
    hub = {} if push is None else read_hub(push, [name for name in names if _read_local(to / name) is None])

    def merged() -> dict[str, str]:  # every refusal before anything is written
        existing = {**hub, **{name: (text, repr(str(to / name))) for name in names
                              if (text := _read_local(to / name)) is not None}}
        card = model_card(runs, *existing[CARD], replace) if CARD in existing else model_card(runs, None)
        return {CARD: card, **eval_results_files(runs, existing, replace)}

    merged()
    skipped = [f"{run.dataset.spec} is not a Hub dataset: no {EVAL_DIR} entries (the format takes Hub dataset ids only)"
               for run in runs if hub_dataset(run) is None]
    to.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(to, wait=True, what="advsuite export")  # two exports into one card: both merged
    try:
        texts = merged()  # again under the lock: another export may have written meanwhile
        for name, text in texts.items():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(through_link(to / name), text)  # a linked card: the file it names
    finally:
        os.close(lock)
    url = upload(to, push, list(texts), create_pr) if push is not None else None
    return Exported(to, list(texts), skipped, url)


# --------------------------------------------------------------------------- helpers


def _check_sizes(path: Path, run: Results) -> None:
    """The leaderboard's bounds (fields come from files anyone can write: three 1 MB warnings made
    a 12 MB card in 83 s)."""
    texts = [run.model.name, run.dataset.spec, run.dataset.split, *run.warnings, *run.attacks,
             *(str(finding.get("message", "")) for finding in (run.illusion.findings if run.illusion else []))]
    if len(run.warnings) > MOST_NOTES or any(len(text) > LONGEST_NOTE for text in texts):
        raise ConfigError(f"{str(path)!r} holds more than {MOST_NOTES} warnings or a name or warning over "
                          f"{LONGEST_NOTE:,} characters: no run writes that; it was not exported")


def _args(common: dict[str, Any], interval: list[float] | None, threat: Any = None, **extra: Any) -> dict[str, Any]:
    typed = {} if threat is None else {key: value for key, value in threat.model_dump().items() if value is not None}
    return {**common, **typed, **extra, **({} if interval is None else {"ci95": list(interval)})}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "-", text.replace("=", "")).strip("-") or "none"


def _eval_results(run: Results) -> list[Any]:
    from huggingface_hub import EvalResult

    modality = _modality(run)
    dataset = _dataset_name(run)
    # The Hub's dataset revision is a git revision of the dataset repo: only one the run recorded
    # (the data's fingerprint goes in the args).
    revision = run.dataset_setting("revision")
    return [EvalResult(task_type=TASKS[modality], dataset_type=dataset, dataset_name=dataset,
                       dataset_config=run.dataset_setting("config"), dataset_split=run.dataset.split,
                       dataset_revision=revision, metric_type=score.metric, metric_value=score.value,
                       metric_name=score.name, metric_config=score.config, metric_args=score.args)
            for score in scores(run)]


def _modality(run: Results) -> str:
    for modality in ("image", "text"):
        if modality in run.dataset.columns:
            return modality
    threats = [entry.threat for entry in [*run.attacks.values(), *run.distributional.values()]]
    if any(threat.level is not None for threat in threats):
        return "text"
    if any(threat.norm is not None for threat in threats):
        return "image"
    raise ConfigError(f"results of task {run.task!r} record no attack and no input column: cannot tell whether "
                      "the model classifies text or images")


def _entries(run: Results, hub_id: str) -> list[dict[str, Any]]:
    config, revision = run.dataset_setting("config"), run.dataset_setting("revision")
    prefix = "/".join(_slug(part) for part in [*([config] if config else []), run.dataset.split])
    sample = f"n={run.dataset.n} of {run.dataset.size}, seed {run.seed}"
    about = (f"; model {run.model.name}; dataset fingerprint {run.dataset.fingerprint}; advsuite {run.suite_version}, "
             f"recipe {run.config_hash}")
    if run.illusion is not None and run.illusion.flagged:
        about += (f"; ILLUSION OF ROBUSTNESS flagged: an aware adversary lowers it by up to "
                  f"{100 * run.illusion.max_drop:.1f} pp")
    if run.warnings:
        about += f"; {len(run.warnings)} warning(s), listed in the model card"
    weights = f"; weights {run.model.weights}" if run.model.weights else ""  # last: hub_merge.NOTES_WEIGHTS
    found = []
    for score in scores(run):
        ci = score.args.get("ci95")
        access = f"{score.args['access']}, " if "access" in score.args else ""
        interval = "" if ci is None else f", 95% CI [{ci[0]:.4g}, {ci[1]:.4g}]"
        found.append({"dataset_id": hub_id, "task_id": f"{prefix}/{score.path}", "value": score.value,
                      "dataset_revision": revision, "date": run.created,
                      "notes": f"{score.name}; {access}{sample}{interval}{about}{weights}"})
    try:  # huggingface_hub >= 1.4 knows the format: let it serialise
        from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml
    except ImportError:  # the spec's keys, in its order (and eval_result_entries_to_yaml's)
        return [{"dataset": {"id": hub_id, "task_id": entry["task_id"], **({"revision": revision} if revision else {})},
                 "value": entry["value"], "date": entry["date"], "notes": entry["notes"]} for entry in found]
    return eval_result_entries_to_yaml([EvalResultEntry(**fields) for fields in found])


def _read_entries(source: str, text: str) -> list[dict[str, Any]]:
    """The entries of an existing ``.eval_results`` file (``source`` names it in errors)."""
    refuse = f"{source} is not {{}}; fix or remove it (it is not overwritten)"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(refuse.format(f"valid YAML ({yaml_problem(error, 0)})")) from error
    except RecursionError as error:
        raise ConfigError(refuse.format("YAML nested this deeply")) from error
    if data is None:
        return []
    if not (isinstance(data, list) and all(isinstance(item, dict) and isinstance(item.get("dataset"), dict)
                                           for item in data)):
        raise ConfigError(refuse.format("a list of eval results entries ({dataset: {id, task_id}, value})"))
    return data


def _read_local(path: Path) -> str | None:
    if not path.exists():
        return None
    if not path.is_file():  # a named pipe: reading it waited forever
        raise ConfigError(f"{str(path)!r} is not a regular file: name the directory of a card to write")
    try:
        return path.read_bytes().decode("utf-8")  # as it is: read_text made a CRLF card's lines LF
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {str(path)!r}: {getattr(error, 'strerror', None) or error}") from error
