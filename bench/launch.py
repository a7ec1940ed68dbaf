"""The command line that starts ``python -m suite ...`` in one process or under ``accelerate launch``
(shared by the bench scripts that compare process counts)."""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def suite_command(suite_args: list[str], processes: int) -> list[str]:
    """``python -m suite SUITE_ARGS``, or the same under ``accelerate launch --multi_gpu`` with
    ``processes`` processes (two gloo processes on a CPU-only machine)."""
    suite = ["-m", "suite", *suite_args]
    if processes == 1:
        return [sys.executable, *suite]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), *suite]
