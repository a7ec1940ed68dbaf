"""The Hub side of ``advsuite export --push`` (:mod:`suite.report.hub`): the repo id, the repo's
current card and ``.eval_results`` files, and the upload."""

from __future__ import annotations

from pathlib import Path

from suite.errors import ConfigError, first_line
from suite.text import printable


def check_repo_id(repo_id: str) -> None:
    """Refuse a ``--push`` value that is not a Hub repo id (``namespace/name``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ConfigError(f"--push {printable(repr(repo_id))} is not a Hub repo id: namespace/name, letters, digits, "
                          "'-', '_' and '.', at most 96 characters") from None


def read_hub(repo_id: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """The repo's current copies of those of ``names`` it has, with where they are from."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    found = {}
    for name in names:
        try:
            path = HfApi().hf_hub_download(repo_id=repo_id, filename=name)
            found[name] = (Path(path).read_text(encoding="utf-8"), f"{name} of {repo_id!r} on the Hub")
        except LocalEntryNotFoundError as error:  # offline: not "absent", or the card on the Hub would be lost
            raise ConfigError(f"cannot read {name} of {repo_id!r} from the Hub (offline?), so cannot merge into it: "
                              f"put the repo's current {name} (if any) in --to, or push when online") from error
        except EntryNotFoundError:
            continue
        except (HfHubHTTPError, OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read {name} of {repo_id!r} from the Hub: {first_line(error)[:200]}") from error
    return found


def upload(directory: Path, repo_id: str, files: list[str], create_pr: bool) -> str:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        commit = HfApi().upload_folder(repo_id=repo_id, repo_type="model", folder_path=directory,
                                       allow_patterns=files, create_pr=create_pr,
                                       commit_message="Add adversarial robustness results (advsuite export)")
    except (HfHubHTTPError, OSError) as error:
        raise ConfigError(f"push to {repo_id!r} failed ({first_line(error)[:200]}); the files are in "
                          f"{str(directory)!r}") from error
    return str(getattr(commit, "pr_url", None) or getattr(commit, "commit_url", commit))


