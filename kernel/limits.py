"""What one request may cost, what it did cost, and when it must stop.

Every request's time (``Cost.steps``, elementary array operations) and memory (``Cost.bytes``) are computed from
its spec and public sizes before anything is built or read, and checked against ``Limits``: refused with the size,
the limit and the option that raises it. While it runs, ``Work`` counts the steps it takes and stops it at its
deadline, which is always before its charge (docs/privacy/arithmetic.md#cost). ``Memory`` holds what an analyst's
kernel holds, drawn from the one budget all the analysts of a served table share.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

RAISE = (
    "a data owner can raise it with Kernel(..., limits=Limits({option}=...)), or with `--{flag}` on "
    "`ektelo-ng kernel serve` or `ektelo-ng census release`"
)

SOURCE_BYTES = 4096
"""What a source holds besides its data (its lineage node, accounting and handle), counted against ``memory``."""
OBJECT_STEPS = 1 << 16
"""The Python work of one object of a request (a leaf, a block; a matrix or a batch item counts two), in steps:
measured at 0.45 ms for a one-leaf matrix and its item, about 6 x 2^16 steps of a nanosecond."""
SOURCE_STEPS = 1 << 14
"""The Python work of one source listed by ``budget`` or ``lineage`` (its spend as a budget, its node and edge as
JSON), in steps: measured at 9 us (budget) and 14 us (lineage)."""
BYTE_STEPS = 16
"""The work of one byte of transcript a reply lists, in steps: measured at about 14 ns."""
SKIP_STEPS = 32
"""The work of passing over one source (or transcript entry) before a page's cursor, in steps: 36 ns measured."""


@dataclass(frozen=True)
class Cost:
    """Elementary steps, and peak bytes held while they run."""

    steps: int = 0
    bytes: int = 0

    def then(self, other: Cost) -> Cost:
        """This, then ``other``: the steps add up, the peaks do not."""
        return Cost(self.steps + other.steps, max(self.bytes, other.bytes))

    def __add__(self, other: Cost) -> Cost:
        """Both at once: steps and bytes add up."""
        return Cost(self.steps + other.steps, self.bytes + other.bytes)

    def __mul__(self, times: int) -> Cost:
        return Cost(self.steps * times, self.bytes * times)


class Timeout(Exception):
    """A request reached its deadline before its charge: stopped, and nothing was charged."""


class Work:
    """The steps a request has taken; past ``deadline`` (``time.monotonic()``), the next step raises Timeout."""

    def __init__(self, deadline: float | None = None):
        self.steps, self.deadline = 0, deadline

    def step(self, count: int) -> None:
        self.steps += int(count)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Timeout(
                f"the request reached its deadline after {self.steps} steps and was stopped before its "
                "charge: nothing was measured or charged; send smaller requests"
            )


@dataclass(frozen=True)
class Limits:
    """``max_cells``: the largest array one request may build (2^25 64-bit cells are 256 MB); ``work``: the steps one
    request may take (2^32 are about 5 s); ``memory``: the bytes an analyst's kernel may hold, its sources (their
    data and ``SOURCE_BYTES`` each) and a request's own working memory together; ``sources``: how many sources it
    may hold (each is Python work for every later ``lineage`` and ``budget``); ``scans``: the columns of the
    table's rows one request may read (a histogram of k attributes reads k, each predicate node one more: the
    table's size is the owner's, so a request's time over it is about scans x rows x 0.3 ns); ``request_bytes``,
    ``request_objects`` and ``request_values``: the size of a request's JSON text (a served kernel's largest frame),
    how many objects and how many values it holds, checked before it is parsed."""

    max_cells: int = 1 << 25
    work: int = 1 << 32
    memory: int = 1 << 33
    sources: int = 1 << 16
    scans: int = 1 << 12
    request_bytes: int = 1 << 24
    request_objects: int = 1 << 17
    request_values: int = 1 << 20

    def cells(self, what: str, count: int) -> None:
        if count > self.max_cells:
            raise ValueError(
                f"{what} has {count} cells, over the kernel's limit of {self.max_cells} per request; "
                + RAISE.format(option="max_cells", flag="max-cells")
            )

    def check(self, what: str, cost: Cost, memory: Memory) -> None:
        """Refuse ``what`` if its steps exceed the work limit, or else take its bytes from ``memory``."""
        if cost.steps > self.work:
            raise ValueError(
                f"{what} takes about {cost.steps} steps of work, over the kernel's limit of {self.work} "
                "per request; " + RAISE.format(option="work", flag="work")
            )
        memory.take(cost.bytes, what)

    def text(self, text: str | bytes) -> None:
        """Before parsing: the request's length, its objects (each '{' opens one) and its values (each but the first
        follows a '[', ',' or ':'; these and '{' are counted in strings too, an over-count made without parsing)."""
        size = len(text)
        if size > self.request_bytes:
            raise ValueError(
                f"the request is {size} bytes long, over the kernel's limit of {self.request_bytes}; "
                + RAISE.format(option="request_bytes", flag="request-bytes")
            )
        marks = [mark.encode() if isinstance(text, bytes) else mark for mark in "{[,:"]
        objects = text.count(marks[0])
        if objects > self.request_objects:
            raise ValueError(
                f"the request holds {objects} objects, over the kernel's limit of {self.request_objects}"
                " (each costs parsing): send structured matrices (a ranges or dense leaf instead of many "
                "small factors); " + RAISE.format(option="request_objects", flag="request-objects")
            )
        values = sum(text.count(mark) for mark in marks)
        if values > self.request_values:
            raise ValueError(
                f"the request holds up to {values} JSON values, over the kernel's limit of {self.request_values}"
                " (each is built before it is checked): send arrays as base64 data, and long lists in several "
                "requests; " + RAISE.format(option="request_values", flag="request-values")
            )


class Memory:
    """The bytes held, at most ``total``, each drawn from ``parent`` too: an analyst's kernel holds its sources and
    its request's working memory, drawn from the server's, which every analyst of a served table shares, so all
    together hold no more than it. Every amount is a public size (never the data)."""

    def __init__(self, total: int, parent: Memory | None = None, holder: str = "the kernel", advice: str = ""):
        self.total, self.parent, self.held = total, parent, 0
        self.holder, self.advice = holder, advice or RAISE.format(option="memory", flag="memory")
        self._lock = threading.Lock()

    def take(self, more: int, what: str = "this request") -> None:
        """Hold ``more`` bytes, or refuse ``what`` having taken nothing."""
        with self._lock:
            if self.held + more > self.total:
                raise ValueError(
                    f"{what} needs {more} bytes of memory, and {self.holder} holds {self.held} already: over its "
                    f"memory limit of {self.total}; release sources you no longer need (the 'release' request), "
                    "or " + self.advice
                )
            if self.parent is not None:
                self.parent.take(more, what)
            self.held += more

    def give(self, less: int) -> None:
        with self._lock:
            self.held -= less
            if self.parent is not None:
                self.parent.give(less)
