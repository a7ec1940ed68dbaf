"""A demo advsuite plugin: the attack ``uniform_noise`` and the model scheme ``demo:``.

Nothing is registered here: the suite reads this package's entry points (pyproject.toml) and
imports :mod:`.attacks` or :mod:`.models` only when their entry is first used.
"""
