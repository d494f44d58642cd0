"""Client-side operators: workloads and error formulas, selection, measurement requests, inference.

``operators.advise`` (from :mod:`.advice`, imported on first use) compares every strategy selector on a workload.
"""


def __getattr__(name: str):
    if name == "advise":
        from .advice import advise

        return advise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
