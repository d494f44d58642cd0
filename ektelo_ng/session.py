"""Opening a session with a kernel: in-process (``protect``), in a child process (``kernel_process``), or served
by the data owner (``connect``)."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from ektelo_ng.gateway.credentials import Credential
from ektelo_ng.gateway.owner import init_service
from ektelo_ng.operators.budget import Budget, accounted
from ektelo_ng.operators.client import Session, socket_transport
from ektelo_ng.operators.domains import DomainLike, as_domain
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.limits import Limits
from ektelo_ng.kernel.service import MAX_ROWS, Kernel
from ektelo_ng.kernel.table import TableBackend, load_table

BACKENDS = ("numpy", "duckdb", "spark")


def open_table(table, domain: DomainLike, backend: str = "numpy", **options) -> TableBackend:
    """The private table behind a kernel: validated into memory (numpy) or left to an engine (duckdb, spark).

    ``options`` go to the engine's backend (``connection=`` for DuckDB, ``spark=`` or ``master=`` for Spark).
    A ready ``TableBackend`` (e.g. a ``DuckDBTable`` on your own connection) is used as it is.
    """
    domain = as_domain(domain)
    if backend == "numpy" and type(table).__module__.startswith("pyspark"):
        backend = "spark"  # a Spark DataFrame stays in Spark
    if isinstance(table, TableBackend):
        if table.domain != domain:
            raise ValueError("the table backend was made over a different domain")
        return table
    if backend == "duckdb":
        from ektelo_ng.kernel.backends.duckdb import DuckDBTable

        return DuckDBTable(domain, table, **options)
    if backend == "spark":
        from ektelo_ng.kernel.backends.spark import SparkTable

        return SparkTable(domain, table, **options)
    if backend != "numpy":
        raise ValueError(f"unknown table backend {backend!r}; choose one of {list(BACKENDS)}")
    return load_table(read_columns(table, domain), domain)


def protect(
    table,
    domain: DomainLike,
    budget: Budget,
    *,
    seed: int | None = None,
    ledger: str | Path | None = None,
    backend: str = "numpy",
    max_rows: int = MAX_ROWS,
    limits: Limits = Limits(),
) -> Session:
    """Load ``table`` into an in-process kernel and return a session; ``session.source`` is the root handle.

    ``table``: a dict of columns, a numpy structured or 2-D array, a pandas or polars DataFrame, an Arrow table
    (read through narwhals) or a CSV or Parquet path, validated against ``domain``: a Domain, or an
    ``ek.Schema`` whose labels, bounds and bins the kernel applies as it loads the rows (values outside its labels
    refused, numbers clamped and binned: ``operators.queries.schema``). ``budget``: ``PureDP(epsilon)``, ``ZCDP(rho)`` or ``ApproxDP(epsilon, delta)`` (held as the
    rho that implies it, ``operators.budget``); a bare number is refused. Noise is cryptographically secure unless
    ``seed`` is given, which makes answers reproducible and flags every one of them as seeded. ``ledger`` names a
    file that keeps the spent budget across restarts. In-process mode shares the analyst's Python process, so it
    protects against mistakes, not against a hostile analyst: use ``connect`` for isolation. ``backend="duckdb"`` or
    ``"spark"`` leaves the rows to that engine (``table``: Parquet/CSV files, a table name, or a Spark DataFrame);
    see docs/scaling.md. ``max_rows`` is a public bound on the records (docs/privacy/arithmetic.md): a tighter one
    gives slightly less noise on real-valued strategies; ``limits`` caps the cells one request may build and the
    memory the kernel holds (kernel.limits).
    """
    kernel = Kernel(open_table(table, domain, backend), accounted(budget), seed=seed, ledger=ledger, max_rows=max_rows,
                    limits=limits)
    return Session(kernel.handle_json)


def connect(address: str | None = None, *, credential: str | Path | Credential | None = None,
            timeout: float | None = None) -> Session:
    """A session with a kernel served by another process (``ektelo-ng kernel serve``); this process holds no data.

    ``credential``: the file the data owner gave you (``ektelo-ng kernel analysts add``), which also names the
    address unless ``address`` is given; over TCP the session uses TLS and trusts only the service's CA.
    """
    if credential is not None and not isinstance(credential, Credential):
        credential = Credential.read(credential)
    address = address or (credential.address if credential is not None else None)
    if address is None:
        raise ValueError("give the kernel's address (HOST:PORT or unix:PATH), or a credential file that names it")
    return Session(socket_transport(address, credential, timeout))


@contextlib.contextmanager
def kernel_process(table: str | Path, domain: str | Path, budget: Budget, *options: str,
                   timeout: float | None = None) -> Iterator[Session]:
    """A session with a fresh kernel in a child process (``ektelo-ng kernel serve`` with ``options``) on a private
    unix socket, in its own 0700 directory with one analyst holding the whole budget; stopped on exit. Only the
    child reads the table: this process holds handles and noisy answers."""
    budget = accounted(budget)
    with tempfile.TemporaryDirectory(prefix="ektelo-") as folder:
        service = init_service(Path(folder) / "service", budget, tls=False)
        credential = service.add_analyst("plan", budget.value, f"unix:{service.path / 'kernel.sock'}")
        command = [sys.executable, "-m", "ektelo_ng.cli", "kernel", "serve", "--dir", str(service.path),
                   "--table", str(table), "--domain", str(domain), *options]
        errors = Path(folder) / "kernel.err"
        with errors.open("w") as stderr:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            line = child.stdout.readline()
            if "listening on" not in line:
                child.wait()
                raise ValueError(f"the kernel process did not start: {(line + errors.read_text()).strip()}")
            yield connect(credential=credential, timeout=timeout)
        finally:
            child.kill()
            child.wait()


def read_columns(table, domain: Domain) -> dict[str, np.ndarray]:
    """A table as columns: a dict of columns, a structured or 2-D array, a pandas DataFrame, or a CSV or Parquet
    path (.parquet, read with pyarrow or DuckDB, whichever is installed)."""
    if isinstance(table, (str, Path)):
        return _read_parquet(Path(table)) if Path(table).suffix.lower() == ".parquet" else _read_csv(Path(table))
    if isinstance(table, Mapping):
        return {str(k): np.asarray(v) for k, v in table.items()}
    if isinstance(table, np.ndarray):
        if table.dtype.names:
            return {n: table[n] for n in table.dtype.names}
        if table.ndim == 2 and table.shape[1] == len(domain):
            return {n: table[:, i] for i, n in enumerate(domain.names)}
        raise ValueError(f"a plain array must have one column per attribute ({len(domain)}), got shape {table.shape}")
    frame = as_data_frame(table)
    if frame is not None:
        return {str(name): frame[name].to_numpy() for name in frame.columns}
    raise TypeError(f"cannot read a table from {type(table).__name__}: give a dict of columns, an array, a pandas or "
                    "polars DataFrame, an Arrow table or a CSV or Parquet path")


DATA_FRAME_LIBRARIES = ("pandas", "polars", "pyarrow", "modin", "cudf")


def as_data_frame(table):
    """A pandas, polars, Arrow (...) table as a narwhals DataFrame (narwhals imported only then), or None."""
    library = type(table).__module__.split(".")[0]
    if library not in DATA_FRAME_LIBRARIES:
        return None
    try:
        import narwhals
    except ImportError:
        raise ImportError(f"reading a {library} table needs narwhals: pip install -e '.[dataframes]'") from None
    return narwhals.from_native(table, eager_only=True)


def _read_parquet(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"table file {path} does not exist")
    try:
        import pyarrow.parquet
    except ImportError:
        try:
            import duckdb
        except ImportError:
            raise ImportError(f"reading the Parquet file {path} needs pyarrow or duckdb: pip install -e '.[parquet]', "
                              "or save the table as CSV") from None
        columns = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(path)]).fetchnumpy()
        missing = {name: int(np.ma.count_masked(column)) for name, column in columns.items() if np.ma.is_masked(column)}
        if missing:
            raise ValueError(f"{path}: missing values (NULL) in {missing}; fill or drop them first")
        return {name: np.asarray(column) for name, column in columns.items()}
    table = pyarrow.parquet.read_table(path)
    return {name: table.column(name).to_numpy() for name in table.column_names}


TABLE_FORMATS = (".csv", ".parquet")


def check_writable(path: Path) -> None:
    """Refuse, before anything is spent, a table path that could not be written: an unknown format, Parquet
    without pyarrow, or a folder that does not exist."""
    path = Path(path)
    if path.suffix.lower() not in TABLE_FORMATS:
        raise ValueError(f"{path}: write a table as .csv or .parquet, not {path.suffix or 'a file without a suffix'}")
    if path.suffix.lower() == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ImportError(f"writing the Parquet file {path} needs pyarrow: pip install -e '.[parquet]', or write .csv")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: folder {path.parent} does not exist")


def write_columns(columns: Mapping[str, np.ndarray], path: Path) -> None:
    """Columns as a table file, read back by :func:`read_columns`: CSV with a header row, or Parquet (pyarrow)."""
    path = Path(path)
    check_writable(path)
    if path.suffix.lower() == ".parquet":
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.table({name: np.asarray(c) for name, c in columns.items()}), path)
        return
    names = list(columns)
    body = np.column_stack([np.asarray(columns[n]).astype(str) for n in names]) if names else np.empty((0, 0))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(body.tolist())


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"table file {path} does not exist")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path} has no header row of attribute names")
        rows = [row for row in reader if row]
    bad = [i + 2 for i, row in enumerate(rows) if len(row) != len(header)]
    if bad:
        raise ValueError(f"{path}: lines {bad[:5]} do not have {len(header)} fields")
    values = list(zip(*rows)) if rows else [()] * len(header)
    return {name.strip(): np.array(column, dtype=object) for name, column in zip(header, values)}
