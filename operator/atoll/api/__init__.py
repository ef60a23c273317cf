"""Pydantic models of the Kueue kinds and of the Kubernetes objects atoll reads."""
