"""Graphical-model inference from noisy marginal measurements (Private-PGM): consistent, non-negative marginals,
answers outside the measured marginals and synthetic records, as post-processing of released measurements."""

from .exact import JunctionTreeModel
from .fit import ITERATIONS, TOLERANCE, fit
from .model import Model
from .regions import RegionGraphModel

__all__ = ["ITERATIONS", "TOLERANCE", "JunctionTreeModel", "Model", "RegionGraphModel", "fit"]
