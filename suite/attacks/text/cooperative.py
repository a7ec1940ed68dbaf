"""Cooperative TextAttack searches: the searches of many examples share forward passes.

TextAttack (like OpenAttack) searches one example at a time, and each step of a search scores
a few dozen candidate texts: on a GPU one example's candidates leave the device mostly idle,
and on a CPU small passes pay their overhead again and again. Here up to ``concurrent``
searches run together, each in its own thread, and take turns: a search runs until it asks the
model for scores, then hands the turn on. Once every live search is waiting, the driver scores
all their pending texts at once (the model's :meth:`~suite.models.base.Classifier.text_rows`:
sorted by token length, in passes sized by rows on the CPU and by tokens on CUDA) and hands
each search its rows. A search that ends is handed out at once and the next example's search
takes its place (:meth:`Driver.stream`). On a GPU the searches run in two lanes: one half's
pass runs in a thread of its own while the other half takes its turns, so the host's search
work and the device's passes overlap (:meth:`Driver.lane_count`).

Everything per example stays per example, so each search is the search TextAttack runs on its
example alone:

- each search has its own TextAttack ``Attack`` (goal function, search method, caches); only
  the transformation and the constraints, which hold no per-example state, are shared;
- one search runs at a time, and Python's, NumPy's and torch's global RNGs (which TextAttack
  draws from) are seeded per example and saved and restored at every hand-off (a pass running
  beside it draws nothing: the model is deterministic);
- the query budget, early exit and result are the example's own goal function's;
- a row's logits do not depend on the texts that share its pass (on the CPU; see
  ``text_rows``). A model without ``text_rows`` gets each search's texts on their own, as one
  search alone would send them.

Only the order in which the model sees texts changes, and the number of passes.
"""

from __future__ import annotations

import copy
import functools
import random
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from suite.attacks.text.wrapper import chunked_logits
from suite.models.base import Classifier

#: How long an aborted search may take to unwind (it is stopped at its next model query).
_JOIN_SECONDS = 10.0


class _Aborted(BaseException):
    """Raised inside a search whose run was abandoned (an error or Ctrl-C in the driver).

    A ``BaseException``, so that TextAttack's ``except Exception`` never swallows it."""


@dataclass(eq=False)
class Search:
    """One example's search: what it was given, where it stands, and what it cost."""

    text: str
    label: int
    seed: int
    attack: Any  # its own TextAttack Attack
    wrapper: Any  # the wrapper its goal function queries
    result: Any = None
    error: BaseException | None = None
    finished: bool = False
    #: The texts it waits to have scored, and their rows once scored.
    request: list[str] | None = None
    reply: torch.Tensor | None = None
    #: Wall seconds of its own turns, plus its share (by rows) of the passes it waited on.
    seconds: float = 0.0
    aborted: bool = False
    _go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _rng: tuple | None = None
    _thread: threading.Thread | None = None

    def release(self) -> None:
        """Let go of the finished search's TextAttack objects once its output is read, so that
        reference counting frees them at once.

        They are reference cycles: the search and its wrapper's channel (which names the
        search), and TextAttack's ``Attack`` and its search method (which holds the attack's
        bound methods). Left to the cyclic collector, a batch of 120 PWWS searches left about
        8,800 objects to it, and inside a run the objects of earlier batches are frozen
        (:func:`~suite.collector.long_lived_frozen`): they would stay until the run's end."""
        if self.attack is not None:
            self.attack.search_method = None
        self.attack = self.wrapper = self.result = self.reply = self.request = None
        self._rng = self._thread = None


def clone_attack(attack: Any, wrapper: Any) -> Any:
    """A TextAttack ``Attack`` that searches like ``attack`` through ``wrapper``, with its own
    goal function, search method and caches; transformation and constraints are shared."""
    goal = copy.copy(attack.goal_function)
    goal.model = wrapper
    if goal.use_cache:
        goal._call_model_cache = type(attack.goal_function._call_model_cache)(
            attack.goal_function._call_model_cache.get_size())
    # The search asks for all its uncached texts in one query; the driver sizes the passes.
    goal.batch_size = 1 << 30
    search = copy.copy(attack.search_method)
    return type(attack)(goal, attack.pre_transformation_constraints + attack.constraints, attack.transformation,
                        search, attack.transformation_cache_size, attack.constraint_cache_size)


#: Word swaps whose replacements are a function of the word alone (WordNet synonyms, embedding
#: neighbours): remembered per word across a recipe's searches (:func:`remember_replacements`).
PURE_WORD_SWAPS = ("WordSwapWordNet", "WordSwapEmbedding")


def remember_replacements(transformation: Any) -> None:
    """Remember, per word, the replacements of ``transformation``'s pure word swaps (inside a
    ``CompositeTransformation`` too): every search of the recipe looks the same words up again
    (PWWS asks WordNet for every word of every example). A remembered list is the list the swap
    returned for that word in this process, so searches are unchanged."""
    for swap in getattr(transformation, "transformations", [transformation]):
        if type(swap).__name__ not in PURE_WORD_SWAPS or "_get_replacement_words" in vars(swap):
            continue
        compute, memo = swap._get_replacement_words, {}

        def remembered(word, *args, _compute=compute, _memo=memo, **kwargs):
            if args or kwargs:  # a variant (WordNet's random=True): not remembered
                return _compute(word, *args, **kwargs)
            if word not in _memo:
                _memo[word] = _compute(word)
            return list(_memo[word])

        swap._get_replacement_words = remembered


def remember_word_splits() -> None:
    """Remember TextAttack's ``words_from_text`` per text and per whitespace token,
    process-wide (at most 65,536 texts and 262,144 tokens).

    TextAttack splits every candidate text into words again (regular expressions per word) each
    time it builds an ``AttackedText``: two thirds of PWWS's own time (profiled on 120 Rotten
    Tomatoes sentences). The split is a function of the text alone, and a remembered split is
    handed out as a new list, so nothing a search does changes.

    A candidate differs from the text it came from in a word or two, so a text seen for the
    first time is split token by token, each token remembered: ``words_from_text`` treats each
    whitespace-separated token on its own (it strips and splits each, then drops empty words),
    so the words of a text are its tokens' words in order. Not so for a text with CJK characters
    (TextAttack segments those with jieba, across tokens): those are split whole, as are calls
    with ``words_to_ignore`` (not remembered)."""
    import textattack.shared.attacked_text as attacked_text
    import textattack.shared.utils as utils
    import textattack.shared.utils.strings as strings

    original = strings.words_from_text
    if getattr(original, "remembered", False):
        return
    token_words = functools.lru_cache(maxsize=1 << 18)(lambda token: tuple(original(token)))

    def whole(text: str) -> tuple[str, ...]:
        if _CJK.search(text):
            return tuple(original(text))
        return tuple(word for token in text.split() for word in token_words(token))

    split = functools.lru_cache(maxsize=1 << 16)(whole)

    def words_from_text(s, words_to_ignore=()):
        if words_to_ignore or not isinstance(s, str):
            return original(s, list(words_to_ignore))
        return list(split(s))

    words_from_text.remembered, words_from_text.original = True, original
    for module in (strings, utils, attacked_text):
        if getattr(module, "words_from_text", None) is original:
            module.words_from_text = words_from_text


def seed_torch(seed: int) -> None:
    """``torch.manual_seed(seed)`` for the generators a search can draw from: the CPU's, every
    CUDA device's once CUDA is up (the driver's ``fork_rng`` brings it up where there is a GPU)
    and MPS's. ``torch.manual_seed`` also queues the seed for devices that are not initialised
    (CUDA without a GPU, XPU, MTIA), recording the caller's stack each time, for generators
    nothing here uses: DeepWordBug's command at 960 sentences on this project's CPU spent 2.27–2.52 s
    of its run outside the searches and passes before, 1.97–2.21 s after (three runs each)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


#: The characters for which TextAttack's ``words_from_text`` segments a text with jieba.
_CJK = re.compile("[\u4e00-\u9fff]")


class Driver:
    """Runs searches together on ``model``, at most ``concurrent`` at a time.

    Args:
        model: The model view every search queries (the served model or an adversary's view).
        concurrent: Most searches alive at once (their pending texts make one pooled query).
        chunk: Most texts per pass for a model without ``text_rows``.
    """

    def __init__(self, model: Classifier, concurrent: int, chunk: int, lanes: int | None = None) -> None:
        self.model = model
        self.concurrent = concurrent
        self.chunk = chunk
        self.lanes = lanes
        self._turn = threading.Semaphore(0)

    def channel(self, search: Search):
        """The function a search's wrapper sends its queries to (blocks until they are scored)."""

        def query(texts: list[str]) -> torch.Tensor:
            search.request = texts
            self._turn.release()
            search._go.acquire()
            if search.aborted:
                raise _Aborted
            reply, search.reply = search.reply, None
            return reply

        return query

    def stream(self, searches: Iterable[Search]) -> Iterator[list[Search]]:
        """Run the searches, at most ``concurrent`` at a time, and yield those that finished after
        each round of turns (in the order they were given within a round). A finished search's
        place goes to the next one at once, so a block's slowest searches never run alone: the
        pooled passes stay as full as the examples left allow. ``searches`` is read lazily, one
        search as each place opens. While the caller holds a yielded list, Python's, NumPy's and
        torch's global RNGs hold the states they had when the stream began (what the caller
        draws from them meanwhile is the caller's affair: the searches keep states of their
        own). Closing the stream early (an error or Ctrl-C in the caller) stops every live
        search, as an error inside it does.

        With two lanes (:meth:`lane_count`) the live searches are split in two halves that take
        turns: while one half's pending texts are scored (in a thread of their own), the other
        half runs its turns, so the host's search work and the model's passes overlap instead of
        adding up. A round is then one half's turns and one pooled query. Which texts share a
        pass changes, and nothing else: a search's queries and replies are its own."""
        waiting = iter(searches)
        lanes = self.lane_count()
        # Places per lane: the window split as evenly as it goes (5 → 3 and 2).
        places = [self.concurrent // lanes + (lane < self.concurrent % lanes) for lane in range(lanes)]
        live: list[list[Search]] = [[] for _ in range(lanes)]
        scoring: list[Future | None] = [None] * lanes
        passes = ThreadPoolExecutor(1, thread_name_prefix="advsuite-text-pass") if lanes > 1 else None
        outer = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        # Each search seeds every CUDA device too (seed_torch): fork_rng gives them (and the CPU) back.
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda):
            try:
                more, lane = True, 0
                while more or any(live):
                    if scoring[lane] is not None:  # this half's replies (an error in its pass is raised here)
                        future, scoring[lane] = scoring[lane], None
                        future.result()
                    runnable, finished, mine = [], [], live[lane]
                    while more and len(mine) < places[lane]:
                        more = self._admit(waiting, mine, runnable)
                    runnable += [s for s in mine if s.reply is not None]
                    while runnable:
                        for search in runnable:
                            self._give_turn(search)
                        runnable = []
                        for search in [s for s in mine if s.finished]:
                            mine.remove(search)
                            if search.error is not None:
                                raise search.error
                            finished.append(search)
                            if more:
                                more = self._admit(waiting, mine, runnable)
                    pending = [s for s in mine if s.request is not None]
                    if pending and passes is not None:
                        scoring[lane] = passes.submit(self._score, pending)
                    elif pending:
                        self._score(pending)
                    if finished:
                        random.setstate(outer[0])
                        np.random.set_state(outer[1])
                        torch.set_rng_state(outer[2])
                        yield finished
                    lane = (lane + 1) % lanes
            finally:
                if passes is not None:  # no pass outlives the stream (an out-of-memory retry follows it)
                    passes.shutdown(wait=True, cancel_futures=True)
                self._abort([search for mine in live for search in mine])
                random.setstate(outer[0])
                np.random.set_state(outer[1])

    def lane_count(self) -> int:
        """Two lanes (:meth:`stream`) where the model runs on a GPU, pools texts (``text_rows``)
        and may be called from two threads at once (``thread_safe``), and two or more searches
        run at once: the GPU's passes then run beside the host's turns. One otherwise: on the
        CPU a lane's pass and the other lane's turns would share the same cores. ``lanes``
        (the constructor's) overrides it."""
        if self.lanes is not None:
            return max(1, min(self.lanes, self.concurrent))
        model = self.model
        if self.concurrent < 2 or getattr(model.device, "type", "cpu") == "cpu" or not model.thread_safe:
            return 1
        return 2 if model.text_rows([]) is not None else 1

    def _admit(self, waiting: Iterator[Search], live: list[Search], runnable: list[Search]) -> bool:
        """Start the next waiting search, if any (False when none is left)."""
        search = next(waiting, None)
        if search is None:
            return False
        live.append(self._start(search))
        runnable.append(search)
        return True

    def _start(self, search: Search) -> Search:
        random.seed(search.seed)
        np.random.seed(search.seed)
        seed_torch(search.seed)
        search._rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        search._thread = threading.Thread(target=self._body, args=(search,), daemon=True,
                                          name="advsuite-text-search")
        search._thread.start()
        return search

    def _body(self, search: Search) -> None:
        search._go.acquire()
        try:
            if not search.aborted:
                search.result = search.attack.attack(search.text, search.label)
        except _Aborted:
            pass
        except BaseException as error:  # re-raised by the driver, in its own thread
            search.error = error
        finally:
            search.finished = True
            self._turn.release()

    def _give_turn(self, search: Search) -> None:
        """Let ``search`` run until it asks for scores or ends, with its own RNG states."""
        py, np_state, torch_state = search._rng
        random.setstate(py)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        search.request = None
        start = time.perf_counter()
        search._go.release()
        self._turn.acquire()
        search.seconds += time.perf_counter() - start
        search._rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())

    def _score(self, searches: list[Search]) -> None:
        """Score every pending text of ``searches``, each text once, and hand each its rows."""
        start = time.perf_counter()
        distinct = list(dict.fromkeys(text for search in searches for text in search.request))
        pooled = self.model.text_rows(distinct) if distinct else None
        if pooled is not None:
            where = {text: row for row, text in enumerate(distinct)}
            for search in searches:
                search.reply = pooled[[where[text] for text in search.request]]
        else:
            for search in searches:  # each search's texts on their own, as it would send them alone
                search.reply = chunked_logits(self.model, search.request, self.chunk)
        seconds = time.perf_counter() - start
        total = sum(len(search.request) for search in searches) or 1
        for search in searches:
            search.seconds += seconds * len(search.request) / total

    def _abort(self, live: list[Search]) -> None:
        for search in live:
            search.aborted = True
            search._go.release()
        for search in live:
            if search._thread is not None:
                search._thread.join(_JOIN_SECONDS)
