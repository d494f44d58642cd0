"""The sealed matrix language: the only matrices the kernel evaluates on private data (``spec``: what a client may
send; ``leaves``: the closed list of leaves; ``sealed``: the one evaluation algorithm with its cost and rounding
bounds; ``rounding``: the float model they rest on)."""

from .sealed import Released, SealedMatrix
from .spec import ArrayData, Stack

__all__ = ["ArrayData", "Released", "SealedMatrix", "Stack"]
