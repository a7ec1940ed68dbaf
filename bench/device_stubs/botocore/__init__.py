"""Stand-in for botocore on a lent GPU machine (bench/device_stubs/README.md)."""

UNSIGNED = object()
