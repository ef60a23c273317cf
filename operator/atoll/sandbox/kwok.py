"""KWOK stage configuration for the sandbox: fake nodes become Ready, bound pods Running,
Job pods complete after a run time, deleted pods go away (a running pod a finalizer keeps
ends Failed first).

The run time of a Job pod is `DEFAULT_RUN_DURATION`, or the Go duration in the pod annotation
`atoll.dev/run-duration` (e.g. `"30s"`, `"2m"`).
"""

from __future__ import annotations

from importlib import resources

RUN_DURATION_ANNOTATION = "atoll.dev/run-duration"
DEFAULT_RUN_DURATION_MS = 3000


def stages(default_run_ms: int = DEFAULT_RUN_DURATION_MS) -> str:
    """The KWOK config file content: every Stage document, separated by `---`."""
    text = resources.files("atoll.sandbox").joinpath("kwok-stages.yaml").read_text()
    return text.replace("__DEFAULT_MS__", str(default_run_ms)).replace(
        "__ANNOTATION__", RUN_DURATION_ANNOTATION
    )
