"""Every bad input is one line and exit 2, with no traceback and no file left behind.

One table, built from the categories of bad input users and hostile inputs bring: CLI flags,
recipes, data files, model directories, output directories, records and leaderboard files.
Each case builds its inputs under a fresh directory (``setup``), runs ``advsuite`` in-process
from that directory, and checks:

- exit status 2;
- stderr is exactly one line, ``advsuite: error: ...``, holding the expected message;
- every file in the directory is as ``setup`` left it: nothing written, nothing changed, no
  lock file left.

The cases live in ``bad_input_*.py`` beside this file, one module per category.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bad_input_cases import Case
from bad_input_cli import CASES as CLI_CASES
from bad_input_compare import CASES as COMPARE_CASES
from bad_input_data import CASES as DATA_CASES
from bad_input_ensembles import CASES as ENSEMBLE_CASES
from bad_input_export import CASES as EXPORT_CASES
from bad_input_faults import CASES as FAULT_CASES
from bad_input_leaderboard import CASES as LEADERBOARD_CASES
from bad_input_models import CASES as MODEL_CASES
from bad_input_output import CASES as OUTPUT_CASES
from bad_input_plugins import CASES as PLUGIN_CASES
from bad_input_train import CASES as TRAIN_CASES
from bad_input_wdro import CASES as WDRO_CASES
from suite.cli.main import main

CASES: list[Case] = [*CLI_CASES, *DATA_CASES, *MODEL_CASES, *ENSEMBLE_CASES, *LEADERBOARD_CASES, *OUTPUT_CASES, *TRAIN_CASES, *WDRO_CASES, *EXPORT_CASES,
                    *PLUGIN_CASES, *COMPARE_CASES, *FAULT_CASES]


def snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every path under ``root`` with its bytes (``None`` for a directory; a symbolic link: where it
    points; a FIFO or other special file: its mode, unread, since reading a FIFO waits for a writer)."""
    def content(path: Path) -> bytes | str | None:
        if path.is_symlink():
            return os.readlink(path)
        if path.is_dir():
            return None
        return path.read_bytes() if path.is_file() else stat.filemode(path.stat().st_mode)

    return {str(path.relative_to(root)): content(path) for path in root.rglob("*")}


def test_the_table_is_large_and_ids_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_no_file(case: Case, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    if case.setup is not None:
        case.setup(work)
    before = snapshot(work)
    monkeypatch.chdir(work)
    if case.patch is not None:
        case.patch(monkeypatch)
    with pytest.raises(SystemExit) as caught:
        main([part.format(tmp=work) for part in case.argv])
    err = capsys.readouterr().err
    assert caught.value.code == 2, err
    assert err.startswith("advsuite: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert case.message in err, err
    assert snapshot(work) == before
