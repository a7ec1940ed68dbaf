"""Offline resources of the TextAttack recipes: what each needs, where it lives, how to fetch it.

A recipe declares its resources (:class:`Resource`); before it is built the suite checks each
one and, when one is missing, raises a one-line :class:`~suite.errors.ResourceMissingError`
naming it and the command that fetches it. ``advsuite prefetch --attacks ...`` fills the local
cache when the network is there (:func:`prefetch`).

WordNet without a network: Debian's ``wordnet-base`` package installs WordNet 3.0 under
``/usr/share/wordnet``. NLTK can read those files once they are *copied* (nltk 3.10 refuses
symlinked and hard-linked corpus files) into ``<nltk_data>/corpora/wordnet/`` together with a
``lexnames`` file (Debian ships it only inside the ``lexnames(5WN)`` man page) and an
``index.sense`` (an empty one works and loads faster). :func:`install_wordnet` does exactly
that, and the suite does it by itself the first time a recipe needs WordNet and Debian's
files are present.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite.errors import ModelUnavailableError, ResourceMissingError
from suite.paths import cache_dir

logger = logging.getLogger(__name__)

#: Where Debian's ``wordnet-base`` puts WordNet 3.0.
DEBIAN_WORDNET = Path("/usr/share/wordnet")
WORDNET_FILES = (
    "adj.exc", "adv.exc", "noun.exc", "verb.exc", "cntlist.rev",
    "data.adj", "data.adv", "data.noun", "data.verb",
    "index.adj", "index.adv", "index.noun", "index.verb",
)
#: WordNet 3.0's lexicographer files in file-number order (lexnames(5WN)); the syntactic
#: category (1 noun, 2 verb, 3 adjective, 4 adverb) follows from the name.
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


@dataclass(frozen=True)
class Resource:
    """One thing a recipe needs on disk.

    Attributes:
        kind: ``nltk`` (corpus or model), ``embedding`` (TextAttack download), ``hub`` (Hugging
            Face model), ``flair`` (a flair tagger, from the Hub into flair's own cache),
            ``package`` (a Python package that is not a suite dependency) or ``file`` (a file
            TextAttack's wheel should carry).
        name: NLTK resource id, TextAttack embedding name, Hub repo id, import name, or the
            file's path inside the installed ``textattack`` package.
        path: NLTK only: path inside an ``nltk_data`` dir (``corpora/wordnet``).
        purpose: What the recipe uses it for (shown in errors and ``advsuite ls attacks``).
        install: ``package`` / ``file`` only: how the user gets it (one short sentence).
    """

    kind: str
    name: str
    purpose: str
    path: str = ""
    install: str = ""

    def describe(self) -> str:
        what = {"nltk": "NLTK data", "embedding": "TextAttack embedding", "hub": "Hub model",
                "flair": "flair model (Hub)", "package": "Python package", "file": "TextAttack file"}
        return f"{what[self.kind]} {self.name!r} ({self.purpose})"

    def available(self, install: bool = True) -> bool:
        """Whether the resource can be used now, without a network. WordNet missing from the
        cache is installed from Debian's ``wordnet-base`` where it is, unless ``install`` is
        False (a listing, which writes nothing: :meth:`installable` says it would be)."""
        if self.kind == "nltk":
            if install and self.installable():
                try:
                    install_wordnet(DEBIAN_WORDNET)
                except (OSError, ResourceMissingError) as error:
                    logger.warning("could not install WordNet from %s: %s", DEBIAN_WORDNET, error)
            return _nltk_has(self.path)
        if self.kind == "embedding":
            return (textattack_cache_dir() / "word_embeddings" / self.name).is_dir()
        if self.kind == "hub":
            return _hub_cached(self.name, "config.json")
        if self.kind == "flair":
            return _hub_cached(self.name, "pytorch_model.bin", flair_cache_dir(self.name))
        if self.kind == "package":
            return importlib.util.find_spec(self.name) is not None
        if self.kind == "file":
            spec = importlib.util.find_spec("textattack")
            return spec is not None and spec.origin is not None and (Path(spec.origin).parent / self.name).is_file()
        raise ValueError(f"unknown resource kind {self.kind!r}")

    def installable(self) -> bool:
        """Whether it is WordNet, missing from the cache, and Debian's copy is there to install."""
        return self.kind == "nltk" and self.name == "wordnet" and not _nltk_has(self.path) and DEBIAN_WORDNET.is_dir()

    def fetch_command(self, attack: str) -> str:
        if self.kind in ("package", "file"):
            return self.install
        if self.kind == "nltk" and self.name == "wordnet":
            return (f"advsuite prefetch --attacks {attack} (online), or offline: apt-get install wordnet-base "
                    f"and advsuite prefetch --wordnet-from {DEBIAN_WORDNET}")
        return f"advsuite prefetch --attacks {attack} (needs the network)"


NLTK = {
    "stopwords": Resource("nltk", "stopwords", "stopword constraint", path="corpora/stopwords"),
    "wordnet": Resource("nltk", "wordnet", "WordNet synonyms", path="corpora/wordnet"),
    "omw-1.4": Resource("nltk", "omw-1.4", "WordNet lemma names", path="corpora/omw-1.4"),
    "averaged_perceptron_tagger_eng": Resource(
        "nltk", "averaged_perceptron_tagger_eng", "part-of-speech constraint",
        path="taggers/averaged_perceptron_tagger_eng",
    ),
    "universal_tagset": Resource("nltk", "universal_tagset", "part-of-speech constraint", path="taggers/universal_tagset"),
}


def missing(resources: tuple[Resource, ...]) -> list[Resource]:
    return [resource for resource in resources if not resource.available()]


def require(attack: str, resources: tuple[Resource, ...]) -> None:
    """Raise a one-line :class:`ResourceMissingError` for the first missing resource."""
    absent = missing(resources)
    if absent:
        first = absent[0]
        more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
        raise ResourceMissingError(
            f"attack {attack!r} needs {first.describe()}, which is not available offline{more}; "
            f"fetch it with: {first.fetch_command(attack)}"
        )


def require_for_model(model: str, resources: tuple[Resource, ...]) -> None:
    """Raise a one-line :class:`ModelUnavailableError` when a built-in model that is not yet
    cached cannot be trained for a missing resource (checked before its training starts)."""
    absent = missing(resources)
    if absent:
        first = absent[0]
        raise ModelUnavailableError(
            f"built-in model {model!r} is trained on first use and needs {first.describe()}, which is not "
            f"available offline; fetch it with: {first.fetch_command('pwws')}"
        )


# --------------------------------------------------------------------------- locations


def _nltk_has(path: str) -> bool:
    from suite.attacks.text.offline import configure_nltk

    configure_nltk()
    import nltk

    for candidate in (path, f"{path}.zip"):
        try:
            nltk.data.find(candidate)
            return True
        except LookupError:
            continue
    return False


def textattack_cache_dir() -> Path:
    """TextAttack's download cache (``TA_CACHE_DIR`` or ``~/.cache/textattack``), without importing it."""
    return Path(os.environ.get("TA_CACHE_DIR", "~/.cache/textattack")).expanduser()


def flair_cache_dir(repo_id: str) -> Path:
    """Where flair keeps a Hub model (``$FLAIR_CACHE_ROOT/models/<repo name>``)."""
    root = Path(os.environ.get("FLAIR_CACHE_ROOT", Path.home() / ".flair"))
    return root / "models" / repo_id.split("/", 1)[-1]


def _hub_cached(repo_id: str, filename: str, cache: Path | None = None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, filename, cache_dir=cache), str)


# --------------------------------------------------------------------------- WordNet


def lexnames_text() -> str:
    """The ``lexnames`` file of WordNet 3.0: number, lexicographer file, syntactic category."""
    return "".join(f"{i:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES))


def install_wordnet(source: Path = DEBIAN_WORDNET) -> Path:
    """Copy WordNet 3.0 dict files (Debian's ``wordnet-base``) where NLTK reads them.

    Writes ``<cache>/nltk_data/corpora/wordnet/`` atomically (a temp dir renamed into place),
    adds ``lexnames`` and an empty ``index.sense``, and returns the directory.
    """
    source = Path(source)
    absent = [name for name in WORDNET_FILES if not (source / name).is_file()]
    if absent:
        raise ResourceMissingError(
            f"{str(source)!r} is not a WordNet 3.0 dict dir (missing {', '.join(absent[:3])}); "
            "install it with: apt-get install wordnet-base"
        )
    corpora = cache_dir("nltk_data", "corpora")
    target = corpora / "wordnet"
    damaged = None
    if (target / "lexnames").is_file():
        damaged = wordnet_problem(target)
        if damaged is None:
            return target
    staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=corpora))
    try:
        for name in WORDNET_FILES:
            shutil.copyfile(source / name, staging / name)  # copies: NLTK refuses links
        (staging / "lexnames").write_text(lexnames_text(), encoding="utf-8")
        (staging / "index.sense").write_text("", encoding="utf-8")
        problem = wordnet_problem(staging)  # files of the right names are not yet WordNet
        if problem is not None:
            raise ResourceMissingError(f"{str(source)!r} does not read as WordNet 3.0 ({problem}); nothing was "
                                       "installed: install it with: apt-get install wordnet-base")
        if damaged is not None:  # an installed copy that does not read (from damaged files): replaced
            logger.warning("the installed WordNet %s does not read (%s): replacing it from %s", target, damaged, source)
            aside = Path(tempfile.mkdtemp(prefix=".wordnet-damaged-", dir=corpora))
            with contextlib.suppress(FileNotFoundError):
                os.replace(target, aside / "wordnet")
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.replace(staging, target)
        except OSError:  # another process installed it first
            if not (target / "lexnames").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("installed WordNet 3.0 from %s into %s", source, target)
    return target


def wordnet_problem(directory: Path) -> str | None:
    """Why the WordNet 3.0 dict files in ``directory`` are not WordNet (``None``: they are, as
    far as a lookup of 'dog' in the noun index and data files goes, which NLTK's reader does).
    NLTK's reader itself cannot check a copy that is not yet installed: it maps every copy to
    the installed one."""
    try:
        with open(directory / "index.noun", encoding="utf-8") as index:
            entry = next((line.split() for line in index if line.startswith("dog n ")), None)
        if entry is None:
            return "its index.noun has no entry for 'dog'"
        offsets = [field for field in entry if len(field) == 8 and field.isdigit()]
        if not offsets:
            return "its index.noun entry for 'dog' lists no synset offset"
        with open(directory / "data.noun", "rb") as data:
            data.seek(int(offsets[0]))
            if not data.readline().startswith(offsets[0].encode()):
                return f"its data.noun has no synset at offset {offsets[0]}"
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{type(error).__name__}: {' '.join(str(error).split())[:120]}"
    return None


# --------------------------------------------------------------------------- prefetch


def prefetch(resource: Resource) -> str:
    """Fetch one resource into the local cache; returns a short status line.

    Raises:
        ResourceMissingError: It cannot be fetched (no network, or a package to install).
    """
    if resource.available():
        return f"ok (cached): {resource.describe()}"
    if resource.kind in ("package", "file"):
        raise ResourceMissingError(f"{resource.describe()} is missing and cannot be prefetched; {resource.install}")
    from suite.attacks.text.offline import offline

    if offline():
        raise ResourceMissingError(f"cannot fetch {resource.describe()}: offline mode is on "
                                   "(unset ADVSUITE_OFFLINE and HF_HUB_OFFLINE on a machine with a network)")
    try:
        if resource.kind == "nltk":
            _fetch_nltk(resource)
        elif resource.kind == "embedding":
            _fetch_embedding(resource)
        elif resource.kind == "hub":
            from huggingface_hub import snapshot_download

            snapshot_download(resource.name)
        elif resource.kind == "flair":
            from huggingface_hub import hf_hub_download

            hf_hub_download(resource.name, "pytorch_model.bin", cache_dir=flair_cache_dir(resource.name))
    except ResourceMissingError:
        raise
    except Exception as error:  # network and Hub errors come in many types
        raise ResourceMissingError(f"cannot fetch {resource.describe()}: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from error
    if not resource.available():
        raise ResourceMissingError(f"cannot fetch {resource.describe()} (is the network reachable?)")
    return f"fetched: {resource.describe()}"


def _fetch_nltk(resource: Resource) -> None:
    from suite.attacks.text import offline

    offline.configure_nltk()
    target = cache_dir("nltk_data")
    fetched = offline.REAL_NLTK_DOWNLOAD(resource.name, download_dir=str(target), quiet=True, raise_on_error=False)
    if not fetched and resource.name == "wordnet" and DEBIAN_WORDNET.is_dir():
        install_wordnet(DEBIAN_WORDNET)


def _fetch_embedding(resource: Resource) -> None:
    from suite.attacks.text.offline import import_textattack

    import_textattack()
    from textattack.shared.utils import download_from_s3

    download_from_s3(f"word_embeddings/{resource.name}")
