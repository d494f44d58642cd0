"""The kernel's per-request limits (``kernel.limits.Limits``) as command-line options, for every command that makes
a kernel for its data owner (``kernel serve``, ``census release``): the options a refusal names exist on each."""

from __future__ import annotations

import argparse
import dataclasses

from ektelo_ng.kernel.limits import Limits

HELP = {
    "max_cells": "largest vector or matrix side one request may build",
    "memory": "bytes each analyst's kernel may hold: its sources and one request's working memory",
    "work": "steps of work one request may take, counted before it runs",
    "sources": "sources each analyst's kernel may hold",
    "scans": "columns of the table's rows one request may read: a histogram of k attributes reads k; time is about "
             "scans x rows x 0.3 ns",
    "request_bytes": "longest request a kernel parses, in bytes",
    "request_objects": "most JSON objects in one request",
    "request_values": "most JSON values in one request, counted before it is parsed",
}
"""What each limit bounds, by its field of ``Limits``."""


def add_limit_options(parser: argparse.ArgumentParser, defaults: Limits = Limits()) -> None:
    """``--max-cells``, ``--work``, ... : one option per field of ``Limits``, defaulting to ``defaults``."""
    for field in dataclasses.fields(Limits):
        default = getattr(defaults, field.name)
        parser.add_argument("--" + field.name.replace("_", "-"), type=int, default=default,
                            help=f"{HELP.get(field.name, 'see kernel.limits.Limits')} (default {default})")


def limits_from(args: argparse.Namespace) -> Limits:
    """The ``Limits`` the options of ``add_limit_options`` give."""
    return Limits(**{field.name: getattr(args, field.name) for field in dataclasses.fields(Limits)})
