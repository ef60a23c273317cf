"""atoll: a Kueue-compatible gang admission controller for GPU clusters on Kubernetes."""

__version__ = "0.1.0"
