"""``python -m suite`` (and ``accelerate launch -m suite``) runs the CLI."""

from suite.cli.main import entry

if __name__ == "__main__":
    entry()
