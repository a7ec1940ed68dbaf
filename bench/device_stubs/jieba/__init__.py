"""Stand-in for jieba on a lent GPU machine (bench/device_stubs/README.md): raises if used."""


def cut(*args, **kwargs):
    raise RuntimeError("jieba is not carried to this machine (bench/device_stubs): no Chinese word segmentation")
