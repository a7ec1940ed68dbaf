"""TextAttack imports offline from the project's own NLTK data, silently and fast."""

from __future__ import annotations

import os
import subprocess
import sys


def test_import_textattack_offline_in_a_fresh_process(tmp_path):
    env = {**os.environ, "ADVSUITE_CACHE": str(tmp_path / "cache"), "NLTK_DATA": str(tmp_path / "no-nltk"),
           "HOME": str(tmp_path)}  # no user NLTK data and no TextAttack post-install marker
    code = (
        "import time; t = time.time()\n"
        "from suite.attacks.text.offline import import_textattack\n"
        "ta = import_textattack()\n"
        "import nltk\n"
        "words = nltk.corpus.stopwords.words('english')\n"
        # NLTK's own English list: 198 words, its contractions in, no word of another list
        "assert len(words) == len(set(words)) == 198, len(words)\n"
        "assert {'not', \"i'm\", \"they're\", \"should've\"} <= set(words)\n"
        "assert not {'would', 'could', 'also', 'us'} & set(words)\n"
        "assert nltk.download('wordnet') is False\n"  # not cached: answered at once, no network
        "from textattack.attack_recipes import DeepWordBugGao2018\n"
        "print('seconds', time.time() - t)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "Downloading" not in completed.stderr and "Error loading" not in completed.stderr
    # network attempts would be recorded by the test network guard and fail the session
