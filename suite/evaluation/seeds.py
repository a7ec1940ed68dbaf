"""Training seeds in a recipe: model specs (and attack parameters) may name ``{seed}``.

A recipe's ``sweep: {seeds: [0, 1, 2]}`` runs every task once per seed (``<task>-s<seed>``,
with that ``attack_seed``); where a task's model spec says ``{seed}``
(``builtin:sentiment-ddi-at-s{seed}``, ``hf:runs/ddi-s{seed}``), each replicate evaluates the
model trained with that seed, so a table's mean ± std is over training seeds, as the IoR
paper's are. The same holds for string attack parameters (a transfer attack's ``source``).
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER = "{seed}"


def names_seed(task: Any) -> bool:
    """Whether ``task``'s model, members or attack parameters say ``{seed}``."""
    specs = [task.model.spec, *(member.spec for member in task.model.members or ())]
    params = [value for attack in task.attacks for value in attack.params.values()]
    if task.adversary is not None and task.adversary.opt_attack is not None:
        params += list(task.adversary.opt_attack.params.values())
    return any(isinstance(value, str) and PLACEHOLDER in value for value in [*specs, *params])


def _fill(value: Any, seed: int) -> Any:
    return value.replace(PLACEHOLDER, str(seed)) if isinstance(value, str) else value


def _attack(attack: Any, seed: int) -> Any:
    return attack.model_copy(update={"params": {key: _fill(value, seed) for key, value in attack.params.items()}})


def with_seed(task: Any, seed: int) -> Any:
    """``task`` with ``{seed}`` replaced by ``seed`` in its model, members and attack parameters."""
    model = task.model
    update: dict[str, Any] = {"spec": _fill(model.spec, seed)}
    if model.members:
        update["members"] = tuple(member.model_copy(update={"spec": _fill(member.spec, seed)})
                                  for member in model.members)
    changes: dict[str, Any] = {"model": model.model_copy(update=update),
                               "attacks": tuple(_attack(attack, seed) for attack in task.attacks)}
    if task.adversary is not None and task.adversary.opt_attack is not None:
        changes["adversary"] = task.adversary.model_copy(
            update={"opt_attack": _attack(task.adversary.opt_attack, seed)})
    return task.model_copy(update=changes)
