"""``ektelo-ng kernel``: the data owner's commands to serve a table to analysts (docs/service.md)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from ektelo_ng.operators.budget import accounted
from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, parse_budget, parse_domain, show_budget
from ektelo_ng.session import BACKENDS, open_table
from ektelo_ng.gateway.audit import QUOTA, AuditLog, read_audit
from ektelo_ng.gateway.gatekeeper import Gatekeeper, Rate
from ektelo_ng.gateway.owner import ServiceDirectory, init_service
from ektelo_ng.gateway.server import ServerLimits, make_server
from ektelo_ng.commands.limit_options import add_limit_options, limits_from
from ektelo_ng.kernel.privacy import ZCDP
from ektelo_ng.kernel.service import MAX_ROWS
from ektelo_ng.operators.client import READABLE_DELTA
from ektelo_ng.operators.privacy import zcdp_to_approx_dp
from ektelo_ng.sandbox import make_undumpable

DELTA = READABLE_DELTA


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "kernel", help="serve a private table to analysts (init, analysts, serve, audit)",
        description="Hold a private table in a kernel process and serve analysts, each with a credential and a "
        "share of the table's budget. Deployment: init, analysts add, serve, (analysts connect), audit; see "
        "docs/service.md.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    init = actions.add_parser("init", help="create a service directory: ledger, TLS certificates, credentials",
                              description="Create DIR (mode 0700) with the table's budget ledger, a CA and server "
                              "certificate for TLS, and a folder for analysts' credentials.")
    init.add_argument("dir", type=Path, help="new directory for the service's state")
    init.add_argument("--budget", required=True, help=f"the table's total budget: {BUDGET_HELP}")
    init.add_argument("--host", action="append", help="a name or address analysts use to reach the server (repeat; "
                      "default localhost, 127.0.0.1, ::1 and this machine's name)")
    init.add_argument("--no-tls", action="store_true", help="no certificates (serve on a unix socket or loopback only)")
    init.set_defaults(run=run_init)

    analysts = actions.add_parser("analysts", help="add, list or revoke analysts",
                                  description="Manage who may use the table and how much of its budget each may spend.")
    which = analysts.add_subparsers(dest="which", metavar="add|list|revoke", required=True)
    add = which.add_parser("add", help="give an analyst a share of the budget and write its credential file",
                           description="Add an analyst with a share of the total (shares never exceed it together) "
                           "and write DIR/credentials/NAME.json (mode 0600) to hand to the analyst.")
    add.add_argument("name", help="the analyst's name: letters, digits, '_', '.', '-'")
    add.add_argument("--budget", required=True, help=f"the analyst's share, in the table's kind: {BUDGET_HELP}")
    add.add_argument("--address", help="HOST:PORT or unix:PATH written into the credential for ek.connect")
    show = which.add_parser("list", help="every analyst's share and spend (the owner's view)",
                            description="Show the total, every analyst's share, spend and status, and under zCDP the "
                            "(epsilon, delta) each amounts to.")
    status = actions.add_parser("status", help="the ledger's state: the table's budget, what each analyst was given "
                                "and spent", description="The data owner's view of a service's ledger (the same as "
                                "`kernel analysts list`): the total, what is given to analysts and spent, each "
                                "analyst's share, spend and status, and under zCDP the (epsilon, delta) they amount to.")
    revoke = which.add_parser("revoke", help="stop an analyst at once and free the unspent part of its share")
    revoke.add_argument("name")
    for sub in (add, show, revoke, status):
        sub.add_argument("--dir", type=Path, required=True, help="the service directory (from `kernel init`)")
        sub.set_defaults(run=run_analysts, which=sub.prog.split()[-1])
    for sub in (show, status):
        sub.add_argument("--delta", type=float, default=DELTA, help=f"delta for zCDP conversions (default {DELTA:g})")
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")

    serve = actions.add_parser(
        "serve", help="load the table and answer analysts' requests",
        description="Load a table (CSV, or Parquet/CSV left to DuckDB or Spark), validate it against a domain, and "
        "answer authenticated analysts on a unix socket (mode 0600) or over TCP with TLS. Analysts connect with "
        "ektelo_ng.connect(credential=FILE); their process never holds the data.",
    )
    serve.add_argument("--dir", type=Path, required=True, help="the service directory (from `kernel init`)")
    serve.add_argument("--table", required=True, help="CSV file with a header row of attribute names, or a Parquet file; with --backend "
                       "duckdb or spark also globs and directories of them, with spark a table name")
    serve.add_argument("--domain", required=True, help=f"the table's domain: {DOMAIN_HELP}")
    serve.add_argument("--backend", choices=BACKENDS, default="numpy",
                       help="numpy: validate the rows into this process (default); duckdb or spark: the engine reads them")
    serve.add_argument("--spark-master", help="Spark master URL, e.g. spark://host:7077, yarn, local[4]")
    serve.add_argument("--listen", help="unix:PATH or HOST:PORT (default unix:DIR/kernel.sock); TCP always uses the "
                       "directory's TLS certificate (a directory made with --no-tls serves on a unix socket only)")
    serve.add_argument("--group", help="let this group open the unix socket too (mode 0660)")
    serve.add_argument("--seed", type=int, help="reproducible (non-secure) noise; every answer is flagged")
    serve.add_argument("--max-rows", type=int, default=MAX_ROWS, help="public bound on the table's records "
                       "(default 2^32; checked at start): a tighter one gives slightly less noise")
    add_limit_options(serve)
    serve.add_argument("--server-memory", type=int,
                       help="bytes all analysts' kernels may hold together, each within --memory: a request past it is "
                       "refused before any work (default: half this machine's memory)")
    serve.add_argument("--audit-quota", type=int, default=QUOTA,
                       help="bytes of audit log each analyst may fill per run of the server, past which its requests "
                       "are refused (runs of uncharged requests are written as counts)")
    serve.add_argument("--max-connections", type=int, default=ServerLimits.connections,
                       help=f"analysts' sessions open at once (default {ServerLimits.connections})")
    serve.add_argument("--per-analyst", type=int, default=ServerLimits.per_analyst,
                       help=f"sessions one analyst may hold open (default {ServerLimits.per_analyst})")
    serve.add_argument("--max-frame", type=int, default=ServerLimits.frame,
                       help=f"largest request in bytes (default {ServerLimits.frame})")
    serve.add_argument("--request-timeout", type=float, default=ServerLimits.request_seconds,
                       help=f"seconds one request may run: the kernel stops it then, before its charge "
                       f"(default {ServerLimits.request_seconds:g})")
    serve.add_argument("--rate", type=float, default=Rate.per_second,
                       help=f"requests a second per analyst, on average (default {Rate.per_second:g}; bursts twice that)")
    serve.set_defaults(run=run_serve)

    audit = actions.add_parser("audit", help="read the audit log: who asked what, what was charged or refused")
    audit.add_argument("--dir", type=Path, required=True, help="the service directory")
    audit.add_argument("--analyst", help="only this analyst's entries")
    audit.add_argument("--refused", action="store_true", help="only refused requests")
    audit.add_argument("--last", type=int, default=50, help="show the last N entries (default 50; 0 for all)")
    audit.add_argument("--json", action="store_true", help="print the entries as JSON lines")
    audit.set_defaults(run=run_audit)


def run_init(args: argparse.Namespace) -> int:
    directory = init_service(args.dir, accounted(parse_budget(args.budget)), hosts=args.host, tls=not args.no_tls)
    print(f"created {directory.path}: ledger {directory.ledger_path.name}"
          + ("" if args.no_tls else ", TLS certificates in tls/") + "; next: ektelo-ng kernel analysts add NAME "
          f"--budget ... --dir {directory.path}")
    return 0


def run_analysts(args: argparse.Namespace) -> int:
    directory = ServiceDirectory(args.dir)
    if args.which == "add":
        ledger = directory.ledger()
        share = accounted(parse_budget(args.budget))
        if share.kind != ledger.total.kind:
            raise ValueError(f"the table's budget is {ledger.total.kind}: give the share as " + (
                "epsilon=VALUE" if ledger.total.kind == "pure" else "rho=VALUE or epsilon=E,delta=D"))
        path = directory.add_analyst(args.name, share.value, args.address)
        print(f"added {args.name} with a share of {show_budget(share)}; hand over {path} (it is the credential)")
    elif args.which == "revoke":
        directory.ledger().revoke(args.name)
        print(f"revoked {args.name}: its next request is refused; the unspent part of its share is free again")
    else:
        _print_shares(directory, args.delta, args.json)
    return 0


def _print_shares(directory: ServiceDirectory, delta: float, as_json: bool) -> None:
    ledger = directory.ledger()
    total, shares = ledger.total, ledger.shares()
    zcdp = total.kind == "zcdp"

    def approx(value) -> float | None:
        return zcdp_to_approx_dp(ZCDP(value), delta) if zcdp else None

    rows = [{"analyst": s.analyst, "share": str(s.share), "spent": str(s.spent), "remaining": str(s.share - s.spent),
             "status": "revoked" if s.revoked else "active", "epsilon_at_delta": approx(s.share)} for s in shares]
    allocated = sum((s.spent if s.revoked else s.share for s in shares), 0)
    summary = {"kind": total.kind, "total": str(total.value), "allocated": str(allocated),
               "spent": str(sum((s.spent for s in shares), 0)), "epsilon_at_delta": approx(total.value),
               "delta": delta if zcdp else None}
    if as_json:
        print(json.dumps({"table": summary, "analysts": rows}, indent=2))
        return
    unit = "rho" if zcdp else "epsilon"
    print(f"table: {unit} {float(total.value):.6g} total, {float(allocated):.6g} given to analysts, "
          f"{float(sum((s.spent for s in shares), 0)):.6g} spent" + (f"  (= ({summary['epsilon_at_delta']:.4g}, {delta:g})-DP)"
                                                   if zcdp else ""))
    header = f"{'analyst':<20} {'share':>10} {'spent':>10} {'remaining':>10}  status" + ("   eps at delta" if zcdp else "")
    print(header)
    for s, row in zip(shares, rows):
        line = (f"{s.analyst:<20} {float(s.share):>10.6g} {float(s.spent):>10.6g} {float(s.share - s.spent):>10.6g}"
                f"  {row['status']:<7}")
        print(line + (f"  {row['epsilon_at_delta']:>12.4g}" if zcdp else ""))


def run_serve(args: argparse.Namespace) -> int:
    make_undumpable()  # before it reads a token or a row: other processes of this user cannot read its memory
    directory = ServiceDirectory(args.dir)
    ledger = directory.ledger()
    options = {"master": args.spark_master} if args.backend == "spark" and args.spark_master else {}
    table = open_table(args.table, parse_domain(args.domain), args.backend, **options)
    audit = AuditLog(directory.audit_path, quota=args.audit_quota, warn=lambda message: print(
        f"ektelo-ng kernel: warning: {message}", file=sys.stderr, flush=True))
    gate = Gatekeeper(table, ledger, audit=audit, rate=Rate(args.rate, max(1, int(2 * args.rate))), seed=args.seed,
                      max_rows=args.max_rows, limits=limits_from(args),
                      server_memory=args.server_memory)
    listen = args.listen or f"unix:{directory.path / 'kernel.sock'}"
    tls = None if listen.startswith("unix:") else directory.server_context()
    server_limits = ServerLimits(connections=args.max_connections, per_analyst=args.per_analyst, frame=args.max_frame,
                                 request_seconds=args.request_timeout)
    server = make_server(gate, listen, tls=tls, limits=server_limits, group=args.group)
    address = server.server_address
    shown = f"unix:{address}" if isinstance(address, str) else f"{address[0]}:{address[1]}"
    how = "unix socket, mode " + ("0660" if args.group else "0600") if isinstance(address, str) else "TLS"
    print(f"ektelo-ng kernel listening on {shown} ({how}); audit log {directory.audit_path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        audit.close()
    return 0


def run_audit(args: argparse.Namespace) -> int:
    directory = ServiceDirectory(args.dir)
    if not directory.audit_path.is_file():
        raise FileNotFoundError(f"no audit log in {directory.path} yet: it is written once the kernel serves")
    entries = [e for e in read_audit(directory.audit_path)
               if (args.analyst is None or e.get("analyst") == args.analyst)
               and (not args.refused or e.get("outcome") != "ok")]
    shown = entries[-args.last:] if args.last else entries
    if args.json:
        for entry in shown:
            print(json.dumps(entry))
        return 0
    print(f"{'time':<19} {'analyst':<16} {'op':<20} {'outcome':<16} charge")
    for e in shown:
        at = datetime.fromtimestamp(e["time"]).strftime("%Y-%m-%d %H:%M:%S")
        print(f"{at:<19} {str(e.get('analyst')):<16} {str(e.get('op')):<20} {e.get('outcome'):<16} "
              f"{e.get('charge') or ''}")
    refused = sum(e.get("outcome") != "ok" for e in entries)
    print(f"{len(entries)} entries ({refused} refused); showing the last {len(shown)}", file=sys.stderr)
    return 0
