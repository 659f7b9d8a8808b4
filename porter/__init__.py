"""porter: keep AI software running on Ascend NPUs while its upstreams move."""

__version__ = "0.1.0"
