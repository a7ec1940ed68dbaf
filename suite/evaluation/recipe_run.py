"""The public Python API for recipes: ``suite.run_recipe(recipe, output=...)``.

It runs exactly what ``advsuite run`` runs (the command calls it, then prints): every task of
the recipe, sweeps expanded, with the recipe's seed and batch size
(:func:`~suite.evaluation.tasks.run_tasks`); with ``output`` set, one sub-directory per task
(records, ``run.json``, ``results.json``; a rerun resumes) and the recipe's own tables next to
them: ``adversary_table.csv`` (adversary temperatures), ``ior_tables.md``/``.csv`` (the
illusion-of-robustness tables), ``study.csv``/``.png`` (a batch-size sweep) and
``alpha_sweep.csv``/``.png`` (an ensemble's α sweep), each only where it applies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.evaluation.options import RunOptions
from suite.evaluation.records import RUN_FILE
from suite.evaluation.recipe import RECIPE_FILES, Recipe, TaskConfig, load_recipe, parse_recipe
from suite.evaluation.recipes_dir import resolve_recipe
from suite.evaluation.tasks import run_tasks
from suite.report.results import Results
from suite.text import printable

logger = logging.getLogger(__name__)

RecipeLike = str | Path | Recipe | Mapping[str, Any]


def run_recipe(
    recipe: RecipeLike,
    output: str | Path | None = None,
    *,
    limit: int | None = None,
    overwrite: bool = False,
    wait: bool = False,
    log_samples: bool = False,
    deterministic: bool = False,
    command: str | None = None,
) -> list[Results]:
    """Run every task of ``recipe``; their results, in the order the recipe expands them.

    The keywords are ``advsuite run``'s flags.

    Args:
        recipe: A recipe file, the name of a shipped recipe (``advsuite ls recipes``), a loaded
            :class:`~suite.evaluation.recipe.Recipe`, or its fields as a mapping (as in YAML).
        output: Directory for the runs, one sub-directory per task, and the recipe's tables;
            ``None`` keeps everything in memory.
        limit: Quick run: at most ``limit`` examples per task (a seeded subsample, as ``n``
            is); an adversary fits its temperatures, and runs its ``opt`` search, on at most
            ``limit`` examples too.
        overwrite: Start over in ``output`` (clear what the suite wrote there); else a rerun
            resumes, and another run there is refused.
        wait: Wait for another run writing to ``output`` (else refuse).
        log_samples: Also write ``samples.md`` per task (needs ``output``).
        deterministic: Deterministic kernels and no TF32 while the tasks run.
        command: The command line recorded in provenance (default ``suite.run_recipe(...)``).

    Returns:
        The results (on the main process of a multi-process launch; an empty list on the
        others). A task whose model needs an offline resource that is missing is skipped
        with a warning naming the fetch command.

    Raises:
        SuiteError: A subclass with the same one-line message as the CLI (an unknown recipe
            name, a bad field, an output directory in use...).
    """
    from suite.evaluation.api import check_arguments

    check_arguments(limit=limit, output=output)  # limit=-1 had run 358 examples where the task said 10
    loaded = as_recipe(recipe)
    tasks = loaded.expanded_tasks()
    if limit is not None:
        tasks = tuple(limited(task, limit) for task in tasks)
    directory = None if output is None else Path(output)
    if directory is not None and (directory / RUN_FILE).is_file():
        # One evaluation's directory: the recipe's tables would mix with its files, and a task
        # named like its samples/ would write into them.
        raise ConfigError(f"output {str(directory)!r} is one evaluation's directory (it holds {RUN_FILE}); a recipe "
                          "writes a sub-directory per task and its tables: choose another --output")
    stale = [] if directory is None else check_output(directory, loaded, tasks, overwrite)
    options = RunOptions(seed=loaded.seed, batch_size=loaded.batch_size, output=directory, subdirs=True,
                         overwrite=overwrite, wait=wait, log_samples=log_samples, deterministic=deterministic,
                         command=command or "suite.run_recipe(...)")
    results = run_tasks(tasks, options, skip_unavailable=True)
    if results and directory is not None:
        for name in stale:  # another recipe's tables (check_output): they describe runs these do not
            (directory / name).unlink(missing_ok=True)
        tables = write_recipe_tables(loaded, results, directory)
        claim_output(directory, loaded, [path.name for files in tables.values() for path in files])
        for name, files in tables.items():
            logger.info("%s: %s", name, ", ".join(str(path) for path in files))
    return results


#: What ``recipe.json`` says it is: the suite's mark on a recipe's output directory.
MARK_KIND = "advsuite recipe output"


def check_output(directory: Path, recipe: Recipe, tasks: Sequence[TaskConfig], overwrite: bool) -> list[str]:
    """Refuse, in one line before anything runs, an output directory this recipe may not write
    its tables into; the tables another recipe left there that ``--overwrite`` takes over.

    The recipe's tables (:data:`~suite.evaluation.recipe.RECIPE_FILES`) are written beside its
    tasks' directories, so a directory another recipe wrote would get this one's tables over
    its own (two recipes' runs mixed under one ``study.csv``), and a user's ``study.csv`` would be
    replaced. ``recipe.json`` (:func:`read_mark`) names the recipe that writes there and the
    tables it wrote: another recipe's is refused (with ``--overwrite`` this recipe takes the
    directory over and removes the tables the other wrote, and only those); a ``recipe.json``
    that is not the suite's mark (a user's recipe of that name) is refused, ``--overwrite`` or
    not. Without one, a table file is taken as the suite's only beside runs of this recipe's
    tasks (written before ``recipe.json`` was)."""
    marker = directory / RECIPE_FILES[0]
    if marker.exists() or marker.is_symlink():
        owner, tables = read_mark(marker)
        if owner != recipe.name and not overwrite:
            raise ConfigError(f"output {str(directory)!r} holds the runs of recipe {printable(repr(owner))} (its "
                              f"{RECIPE_FILES[0]}): this recipe's tables would mix with them; choose another --output, "
                              "or pass --overwrite to take it over")
        return [name for name in tables if (directory / name).is_file()] if owner != recipe.name else []
    found = [name for name in RECIPE_FILES[1:] if (directory / name).exists()]
    if found and not any((directory / task.name / RUN_FILE).is_file() for task in tasks):
        raise ConfigError(f"output {str(directory)!r} holds {found[0]!r}, which no run of this recipe wrote: the "
                          "recipe's tables would replace it; choose another --output")
    return []


def read_mark(marker: Path) -> tuple[str, list[str]]:
    """The recipe a ``recipe.json`` mark names, and the tables it wrote; a one-line
    :class:`ConfigError` for a file that is not the suite's mark, which nothing replaces.

    The mark is ``{"kind": MARK_KIND, "recipe": name, "tables": [file names]}``; the first
    marks (2026-11-29) held ``{"recipe": name}`` alone: their tables are those of
    :data:`RECIPE_FILES` that are there."""
    why = "it is a symbolic link" if marker.is_symlink() else None if marker.is_file() else "it is not a file"
    mark: object = None
    if why is None:
        try:
            mark = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            why = "it cannot be read as JSON"
    if why is None and isinstance(mark, dict) and isinstance(mark.get("recipe"), str):
        if set(mark) == {"recipe"}:
            return mark["recipe"], [name for name in RECIPE_FILES[1:] if (marker.parent / name).is_file()]
        tables = mark.get("tables")
        if set(mark) == {"kind", "recipe", "tables"} and mark["kind"] == MARK_KIND and isinstance(tables, list) \
                and all(isinstance(name, str) and name in RECIPE_FILES[1:] for name in tables):
            return mark["recipe"], list(tables)
    raise ConfigError(f"output {str(marker.parent)!r} holds {RECIPE_FILES[0]!r}, which advsuite did not write "
                      f"({why or 'it is not the mark a recipe leaves'}): the recipe's mark would replace it; choose "
                      "another --output")


def claim_output(directory: Path, recipe: Recipe, tables: Sequence[str]) -> None:
    """Name ``recipe`` in ``directory``'s ``recipe.json`` (its runs are there now), with the
    tables it wrote there (``tables``, and those the mark named for it before)."""
    from suite.paths import atomic_write_text

    marker = directory / RECIPE_FILES[0]
    owner, before = read_mark(marker) if marker.exists() else (None, [])
    written = sorted({*tables, *(before if owner == recipe.name else ())} & set(RECIPE_FILES[1:]))
    atomic_write_text(marker, json.dumps({"kind": MARK_KIND, "recipe": recipe.name, "tables": written}) + "\n")


def as_recipe(recipe: RecipeLike) -> Recipe:
    """``recipe`` loaded and validated (a :class:`Recipe` is returned as is)."""
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, Mapping):
        return parse_recipe(dict(recipe))
    return load_recipe(resolve_recipe(str(recipe)))


def limited(task: TaskConfig, limit: int) -> TaskConfig:
    """``task`` evaluating at most ``limit`` examples (a seeded subsample, as ``n`` is); an
    adversary fits its temperatures on at most ``limit`` examples of its split, and its ``opt``
    search runs on at most ``limit`` examples too."""
    n = limit if task.dataset.n is None else min(task.dataset.n, limit)
    update: dict[str, Any] = {"dataset": task.dataset.model_copy(update={"n": n})}
    if task.adversary is not None:
        capped = {"opt_n": min(task.adversary.opt_n, limit)}
        if task.adversary.split is not None:  # else it fits on the evaluated examples, capped above
            capped["n"] = limit if task.adversary.n is None else min(task.adversary.n, limit)
        update["adversary"] = task.adversary.model_copy(update=capped)
    return task.model_copy(update=update)


def write_recipe_tables(recipe: Recipe, results: Sequence[Results], output: Path) -> dict[str, list[Path]]:
    """Write the recipe's tables that apply to ``results`` into ``output``; the files, by table."""
    from suite.report.ior import applies, ior_tables, write_ior
    from suite.report.study import write_csv
    from suite.report.table import adversary_rows, has_adversaries

    written: dict[str, list[Path]] = {}
    if has_adversaries(results):
        written["adversary table"] = [write_csv(adversary_rows(results), output / "adversary_table.csv")]
    if applies(results):
        written["illusion-of-robustness tables"] = write_ior(ior_tables(results), output, results)
    if recipe.sweep is not None and recipe.sweep.batch_size:
        from suite.report.study import study_rows, write_study

        rows = study_rows(results, recipe.sweep.params)
        written["study"] = list(write_study(rows, output, title=f"{recipe.name}: success rate vs batch size"))
    if recipe.sweep is not None and recipe.sweep.alphas:
        from suite.report.ensemble_sweep import alpha_rows, write_alpha_sweep

        rows = alpha_rows(results)
        written["alpha sweep"] = list(write_alpha_sweep(rows, output, title=f"{recipe.name}: robust accuracy vs alpha"))
    return written
