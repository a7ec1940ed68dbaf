"""Stand-in for boto3 on a lent GPU machine (bench/device_stubs/README.md): raises if used."""


def _unavailable(*args, **kwargs):
    raise RuntimeError("boto3 is not carried to this machine (bench/device_stubs), and it reaches no network")


resource = client = Session = _unavailable
