"""Bad-input cases: plugins (entry points ``advsuite.attacks`` / ``advsuite.models``) that cannot
be used. Each case installs a hand-made distribution (a ``.dist-info`` directory on
``sys.path``, all ``importlib.metadata`` reads) and has the registries read their groups afresh,
on copies of their tables, so nothing outlives the case."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from bad_input_cases import Case

DIGITS = ("evaluate", "--dataset", "builtin:digits", "--n", "4")


def _plugin(name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str]):
    """A patch installing distribution ``name`` 0.1 with ``entry_points`` and ``modules``."""

    def patch(monkeypatch) -> None:
        from suite.attacks import ATTACKS
        from suite.models.registry import MODEL_SCHEMES

        for registry in (ATTACKS, MODEL_SCHEMES):
            registry.names()  # the plugins installed before the case: read once, as any run does
        root = Path(tempfile.mkdtemp(prefix="advsuite-plugin-"))
        atexit.register(shutil.rmtree, root, True)  # after the session: imports may still read it until then
        info = root / f"{name.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\nSummary: a bad plugin\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
            for group, entries in entry_points.items()))
        for module, source in modules.items():
            (root / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(root))
        for registry, group in ((ATTACKS, "advsuite.attacks"), (MODEL_SCHEMES, "advsuite.models")):
            for table in ("_entries", "_help", "_origins", "_plugins", "_refused"):
                monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
            monkeypatch.setattr(registry, "_group", group)  # read again, with this plugin, on copies

    return patch


CASES = [
    Case("plugin-attack-import-fails", (*DIGITS, "--model", "builtin:digits-cnn", "--attacks", "broken_noise"),
         "attack 'broken_noise' of plugin advsuite-broken 0.1 (advsuite_broken:Noise) cannot be imported: "
         "ModuleNotFoundError",
         patch=_plugin("advsuite-broken", {"advsuite.attacks": {"broken_noise": "advsuite_broken:Noise"}},
                       {"advsuite_broken": "import a_module_nobody_has\n"})),
    Case("plugin-attack-not-an-attack", (*DIGITS, "--model", "builtin:digits-cnn", "--attacks", "not_attack"),
         "attack 'not_attack' of plugin advsuite-odd 0.1 (advsuite_odd:run) is refused: "
         "<function run",
         patch=_plugin("advsuite-odd", {"advsuite.attacks": {"not_attack": "advsuite_odd:run"}},
                       {"advsuite_odd": "def run(model, x, y):\n    return x\n"})),
    Case("plugin-model-not-a-classifier", (*DIGITS, "--model", "plain:net", "--attacks", "fgm_linf"),
         "model scheme 'plain' of plugin advsuite-plain 0.1: its loader returned Sequential, not a "
         "suite.models.Classifier",
         patch=_plugin("advsuite-plain", {"advsuite.models": {"plain": "advsuite_plain:load"}},
                       {"advsuite_plain": "from torch import nn\n\ndef load(name, config):\n"
                                          "    return nn.Sequential(nn.Flatten(), nn.Linear(3072, 10))\n"})),
]
