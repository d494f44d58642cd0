"""Every proof section of docs/privacy/ is pinned to the commit that vetted it and the blobs of the kernel modules
it covers (docs/privacy/pins.json, tests/proof_pins.py): a change to a pinned module fails here, naming the
sections to re-read before re-pinning."""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest

from tests import proof_pins


def test_no_pinned_module_changed_since_its_sections_were_vetted():
    stale = proof_pins.stale()
    pages: dict[str, dict[str, list[str]]] = {}
    for section, reasons in stale.items():
        page, _, anchor = section.partition("#")
        for reason in reasons:
            pages.setdefault(page, {}).setdefault(reason, []).append(anchor or "(the page)")
    assert not stale, ("kernel code changed under its proof: re-read these sections against the code, fix what is "
                       "no longer true, commit, then re-pin them (python -m tests.proof_pins --repin SECTION ... "
                       "--commit HEAD; --repin-all for every one listed):\n" + "\n".join(
                           f"  docs/privacy/{page}: {reason}: {', '.join(anchors)}"
                           for page, by_reason in pages.items() for reason, anchors in by_reason.items()))


def test_every_section_the_kernel_links_is_pinned_and_a_change_is_named():
    pins = proof_pins.load()
    covered = proof_pins.coverage()
    if proof_pins.stale(pins):
        pytest.skip("the pins are stale (the test above names what to re-read); the check of the flags needs them current")
    assert set(pins["sections"]) == set(covered)
    assert covered["laplace.md#guarantee"] == {"kernel/mechanisms/laplace.py", "kernel/measurements.py"}
    changed = copy.deepcopy(pins)
    changed["sections"]["laplace.md#guarantee"]["modules"]["kernel/mechanisms/laplace.py"] = "0" * 40
    del changed["sections"]["noise.md#randomness"]
    del changed["sections"]["data.md#tables"]["modules"]["kernel/domain.py"]
    assert proof_pins.stale(changed) == {
        "laplace.md#guarantee": [f"kernel/mechanisms/laplace.py changed since "
                                 f"{pins['sections']['laplace.md#guarantee']['commit'][:12]}"],
        "noise.md#randomness": ["not pinned"],
        "data.md#tables": ["now covers kernel/domain.py"],
    }


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_blob_hash_is_gits():
    path = proof_pins.ROOT / "kernel" / "noise.py"
    done = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
    assert proof_pins.blob(path) == done.stdout.strip()
