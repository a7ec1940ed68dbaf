"""The suite's version: one place, read by ``suite.__version__``, results provenance, ``advsuite
--version`` and the package metadata (``pyproject.toml``: ``attr = "suite.version.__version__"``).

Bottom layer: imports nothing.
"""

__version__ = "0.1.0"
