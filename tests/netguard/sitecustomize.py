"""Loaded by every Python process the tests start (via PYTHONPATH): record and refuse any
connection to a non-loopback address. The tests fail if anything was recorded."""

import os
import socket

_LOG = os.environ.get("ADVSUITE_NETLOG")
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _allowed(address) -> bool:
    if isinstance(address, (str, bytes)):  # unix socket
        return True
    host = str(address[0])
    return host in ("localhost", "::1") or host.startswith("127.")


def _record(address) -> None:
    if _LOG:
        with open(_LOG, "a") as handle:
            handle.write(f"{os.getpid()} {address!r}\n")


def connect(self, address):
    if not _allowed(address):
        _record(address)
        raise OSError(f"network access blocked in tests: {address!r}")
    return _connect(self, address)


def connect_ex(self, address):
    if not _allowed(address):
        _record(address)
        return 101  # ENETUNREACH
    return _connect_ex(self, address)


if _LOG:
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
