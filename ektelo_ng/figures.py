"""Figures for the commands: matplotlib (the ``plot`` extra), imported only when a figure is asked for."""

from __future__ import annotations


def pyplot(option: str = "--plot"):
    """``matplotlib.pyplot`` drawing to files, or an ImportError naming ``option`` and how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f'{option} needs matplotlib: pip install -e ".[plot]" in the ektelo-ng folder') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
