"""Run a Markdown page's code as a reader would: its ``python`` and ``bash`` blocks in order, in one folder.

Python blocks run in one namespace (a block opening with ``# NAME.py`` is also saved as that file); every line of
a bash block is a command run as typed, but for the substitutions its page lists (sizes, paths and host names
only: ``Page.substitutions``). ``ektelo-ng`` commands run in this process (``ektelo_ng.cli.main``) but for
``kernel serve``, which runs in the background until the page ends; ``python3`` commands run in a subprocess.
``pip install`` lines are not run: they name the extras the commands after them need. With one of them missing,
the block's next command must fail with an error naming its install command, and the rest of the block is
skipped (it rests on that one).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What each extra of pyproject.toml brings, by the module a command would import.
EXTRA_MODULES = {"duckdb": "duckdb", "parquet": "pyarrow", "pandas": "pandas", "plot": "matplotlib",
                 "service": "cryptography", "yaml": "yaml", "spark": "pyspark"}

BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)


@dataclass
class Page:
    """A page's blocks, and the only changes made to its commands: ``(pattern, replacement, why)``, the
    replacement formatted with ``port`` (a free TCP port) and ``folder`` (where the page runs)."""

    path: Path
    substitutions: list[tuple[str, str, str]] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)
    """Commands checked elsewhere (by their first words), with where."""

    def blocks(self) -> list[tuple[str, str]]:
        return [(kind, code) for kind, code in BLOCK.findall(self.path.read_text())]


@dataclass
class Ran:
    """What running a page did: its Python namespace, what it printed, each command as run, and those skipped;
    ``seconds``: each block's time, for the report (``--durations`` of the suite), never asserted."""

    namespace: dict
    out: str
    commands: list[str]
    skipped: list[str]
    seconds: list[tuple[str, float]]


def commands_of(block: str) -> list[str]:
    """A bash block's commands: one a line (comments dropped), each ``&&`` part on its own."""
    lines = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            lines.extend(part.strip() for part in shlex.join(words).split(" '&&' "))
    return lines


def _stream() -> io.TextIOWrapper:
    """A text stream with a ``buffer`` (``run`` relays its plan's bytes there), read back by ``_text``."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_extras(extras: list[str]) -> list[str]:
    """The extras (of those the test knows) whose module is not installed."""
    return [extra for extra in extras if extra in EXTRA_MODULES and importlib.util.find_spec(EXTRA_MODULES[extra]) is None]


def run_page(page: Page, folder: Path) -> Ran:
    """Run every block of ``page`` in ``folder`` (the current directory meanwhile); fail on any command that fails."""
    from ektelo_ng.cli import main

    values = {"port": free_port(), "folder": str(folder)}
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples", folder / "examples", dirs_exist_ok=True)
    # (a page's commands run from the repository's root, as it says, so the files the repository ships are there)
    namespace: dict = {}
    out, commands, skipped, servers, seconds = _stream(), [], [], [], []
    here = os.getcwd()
    os.chdir(folder)
    try:
        for number, (kind, code) in enumerate(page.blocks(), 1):
            started = time.perf_counter()
            if kind == "python":
                first = code.splitlines()[0]
                if re.fullmatch(r"# [\w.-]+\.py", first):
                    (folder / first[2:]).write_text(code)
                with contextlib.redirect_stdout(out):
                    exec(compile(code, f"{page.path.name} block {number}", "exec"), namespace)
                seconds.append((f"python block {number}", time.perf_counter() - started))
                continue
            for pattern, replacement, _ in page.substitutions:
                code = re.sub(pattern, replacement.format(**values), code)
            needs: list[str] = []
            for position, command in enumerate(commands_of(code)):
                words = shlex.split(command)
                if words[:4] == ["python3", "-m", "pip", "install"]:
                    needs = re.fullmatch(r"-e\.?\[?([\w,]*)\]?|-e", "".join(words[4:]).replace("\"", "")).group(1)
                    needs = [extra for extra in needs.split(",") if extra]
                    skipped.append(command)
                    continue
                if any(command == known or command.startswith(known + " ") for known in page.not_run):
                    skipped.append(command)
                    continue
                commands.append(command)
                absent = missing_extras(needs)
                if absent:
                    skipped.extend(commands_of(code)[position + 1:])
                if words[0] == "python3":
                    done = subprocess.run([sys.executable, *words[1:]], capture_output=True, text=True, timeout=300)
                    assert done.returncode == 0, f"{command}: {done.stderr}"
                    out.write(done.stdout)
                elif words[:3] == ["ektelo-ng", "kernel", "serve"]:
                    servers.append(_serve(words, absent))
                elif words[0] == "ektelo-ng":
                    _run_cli(main, command, words, absent, out)
                else:
                    raise AssertionError(f"{page.path.name}: {command}: not a command this test knows how to run")
                if absent:
                    break
            seconds.append((f"bash block {number}: {code.splitlines()[0][:60]}", time.perf_counter() - started))
        return Ran(namespace, _text(out), commands, skipped, seconds)
    finally:
        for server in servers:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
        os.chdir(here)


def _run_cli(main, command: str, words: list[str], absent: list[str], out: io.TextIOWrapper) -> None:
    said = _stream()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(said):
        try:
            code = main(words[1:])
        except SystemExit as stop:
            code = stop.code
    if absent:  # the extra this section names is not installed: the command says how to install it
        assert code == 2 and any(f".[{extra}" in _text(said) or f",{extra}" in _text(said)
                                 for extra in absent), f"{command}, without {absent}: {_text(said)}"
    else:
        assert code == 0, f"{command} failed ({code}): {_text(said)}"


def _serve(words: list[str], absent: list[str]) -> subprocess.Popen | None:
    """``kernel serve`` in the background, once it says it is listening (a bounded read of its first line)."""
    process = subprocess.Popen([sys.executable, "-m", "ektelo_ng.cli", *words[1:]], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if absent:
        process.wait(timeout=60)
        assert process.returncode == 2, line
        return None
    if "listening on" not in line:
        process.kill()
        raise AssertionError(f"{shlex.join(words)}: did not start: {line!r} {process.stderr.read()}")
    return process
