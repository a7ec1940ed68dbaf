"""Stand-in for botocore.config on a lent GPU machine (bench/device_stubs/README.md): raises if used."""


class Config:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("botocore is not carried to this machine (bench/device_stubs), and it reaches no network")
