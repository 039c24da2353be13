"""The tierbench command: run, plan, resume and clean experiments (on this host, or on a cluster's
nodes with --cluster FILE); inspect modes; the OrangeFS cluster by hand; Locust workers for other
nodes; reports and comparisons."""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from typing import Any
from pathlib import Path
from typing import ContextManager

import yaml

from tierbench import runner, study
from tierbench.advise import install
from tierbench.advise import run as advise
from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import MODES_DIR, results_root, state_dir
from tierbench.kinds import registry
from tierbench.measure import profile
from tierbench.modes import apply
from tierbench.modes.model import diff_modes, host_endpoints, list_modes, load_mode
from tierbench.placement import clusterfile, compose, local, model, nodes, placer, runlock
from tierbench.placement.cluster import ClusterPlacer
from tierbench.tiers import orangefs


def precision_options(args: argparse.Namespace) -> dict[str, Any]:
    """The precision options given on the command line, as Precision's keys (None: not given)."""
    return {"half_width_pct": args.precision, "metric": args.metric,
            "min_repetitions": args.min_repetitions, "max_repetitions": args.max_repetitions,
            "budget_min": args.budget_min, "decision_pct": args.decision,
            "deployments": getattr(args, "deployments", None)}


def scale_arg(value: str) -> float | str:
    """--scale: a factor, or `recommended` (a study's rows, each at its own)."""
    if value == study.RECOMMENDED:
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or recommended, got {value!r}") from None


def experiment(args: argparse.Namespace) -> registry.Experiment:
    """The experiment named on the command line, with --scale and the precision options
    applied."""
    if args.scale == study.RECOMMENDED:
        raise ConfigError("--scale recommended is a study's rows' own scale: use it with "
                          "`tierbench plan --study ID` or `tierbench study ID`, or give a number")
    exp = registry.with_scale(registry.load_experiment(args.experiment, placer=args.where),
                              args.scale)
    return registry.with_precision(exp, **precision_options(args))


def resume_folder(args: argparse.Namespace, what: str) -> Path | None:
    """The folder --resume names (None without it); refused when it is not a folder."""
    resume = Path(args.resume) if args.resume else None
    if resume is not None and not resume.is_dir():
        raise ConfigError(f"--resume {resume}: no such {what} folder")
    return resume


def cmd_run(args: argparse.Namespace) -> int:
    """Run an experiment (or continue an interrupted run) and write its results and report."""
    exp = experiment(args)
    resume = resume_folder(args, "run")
    if args.profile:
        check_profile(args)
        exp.profile = args.profile
    compose.preflight(cluster=args.where.cluster is not None)
    with locked(args):
        return run_locked(args, exp, resume)


def check_profile(args: argparse.Namespace) -> None:
    """--profile: perf must run on this host, or on every node that may hold tiers."""
    cluster = args.where.cluster
    for via in [nodes.transport(n) for n in cluster.nodes] if cluster else [profile.LOCAL]:
        profile.check(via)


def locked(args: argparse.Namespace, nodes_now: bool = False) -> ContextManager[object]:
    """The run lock of this host (tierbench.placement.runlock), held while the command changes
    anything; a cluster's nodes take theirs once checked (ClusterPlacer.check), or at once with
    ``nodes_now`` (clean: those that answer). A second run is refused naming who holds it."""
    where = args.where.cluster
    return runlock.hold(shlex.join(["tierbench", *sys.argv[1:]]),
                        [nodes.transport(n) for n in where.nodes] if where and nodes_now else [],
                        skip_unreachable=True)


def run_locked(args: argparse.Namespace, exp: registry.Experiment, resume: Path | None) -> int:
    """cmd_run once the locks are held."""
    run = runner.Run(exp, resume)
    try:
        run_dir = run.execute()
    except runner.RunInterrupted as exc:
        print(f"tierbench: interrupted by {exc}: interfaces restored; partial results in "
              f"{run.dir}; `tierbench run {args.experiment} --resume {run.dir}` continues",
              file=sys.stderr)
        return 130
    finally:
        if run.dir is not None and run.rows:
            runner.write_report(run.dir)
    print(f"tierbench: done: {run_dir / 'summary.csv'}\n"
          f"tierbench: report: {run_dir / 'report.html'}\n{still_up(args.where)}")
    return 0


def still_up(where: placer.Placer) -> str:
    """The line that ends a run: the stack stays up, and the command that removes it."""
    clean = "`tierbench clean" + (f" --cluster {where.cluster.path}`" if where.cluster else "`")
    return f"tierbench: the stack is still up on {where.name}; {clean} removes it"


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the points of an experiment in run order and the estimated duration (or every
    experiment of a study with its time)."""
    if args.study:
        if args.experiment:
            raise ConfigError("plan: give an experiment or --study, not both")
        print("\n".join(study.plan_lines(chosen_rows(args), args.scale, args.where,
                                          precision_options(args))))
        return 0
    if args.rows:
        raise ConfigError("plan: --rows names rows of a study: give --study ID as well")
    if not args.experiment:
        raise ConfigError("plan: name an experiment (e.g. quick) or give --study ID")
    exp = experiment(args)
    print("\n".join(runner.plan_lines(exp) + runner.space_lines(exp)))
    return 0


def chosen_rows(args: argparse.Namespace) -> study.Study:
    """The study of ``args.study``, only the rows of --rows where given."""
    ids = [i.strip() for i in (args.rows or "").split(",") if i.strip()]
    return study.only_rows(study.load(args.study), ids or None)


def cmd_study(args: argparse.Namespace) -> int:
    """Run every experiment of a study and write the study's report."""
    chosen = chosen_rows(args)
    resume = resume_folder(args, "study")
    compose.preflight(cluster=args.where.cluster is not None)
    try:
        with locked(args):
            folder = study.run(chosen, args.scale, resume, args.where, precision_options(args))
    except runner.RunInterrupted as exc:
        print(f"tierbench: interrupted by {exc}: interfaces restored; `tierbench study "
              f"{args.study} --resume <the study folder above>` continues", file=sys.stderr)
        return 130
    print(f"tierbench: study report: {folder / 'study.html'}")
    print(f"tierbench: claims: {claim_counts(folder)} (claims.csv)")
    return 0


def claim_counts(folder: Path) -> str:
    """The scoreboard's counts of a study's folder."""
    from analysis import claims  # pandas: loaded when needed

    with open(folder / "claims.csv", encoding="utf-8") as f:
        return claims.counts_text(claims.counts(csv.DictReader(f)))


def cmd_claims(args: argparse.Namespace) -> int:
    """The paper's claims checked on recorded runs: a table, markdown or claims.csv."""
    from analysis import claims  # pandas: loaded when needed

    boards = study.scoreboards([Path(r) for r in args.runs], args.as_experiment)
    every = [line for _, lines in boards for line in lines]
    if args.csv:
        claims.write_csv(every, Path(args.csv))
    for facts, lines in boards:
        if args.markdown and facts["experiment"].startswith("study "):
            # docs/fidelity.md's lines of a study run: its counts, then one paragraph per row
            print(claims.markdown(lines, facts, facts["rows"], items=False))
            for row in dict.fromkeys(line["row"] for line in lines):
                print(claims.markdown([x for x in lines if x["row"] == row], facts, row))
            continue
        if args.markdown:
            print(claims.markdown(lines, facts))
            continue
        print(f"{facts['experiment']} run {facts['run']} ({facts['date']}, {facts['machine']}, "
              f"scale {facts['scale']}): {claims.counts_text(claims.counts(lines))}")
        for line in lines:
            print(f"  {line['row']:<16} {line['figure']:<10} {line['claim']:<22} "
                  f"{line['verdict']:<15} {claims.interval_text(line)}"
                  + (f"  ({line['note']})" if line["note"] else ""))
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    """Measure which offloads help which workload on these interfaces; write the advice."""
    if args.profile:
        check_profile(args)
    advisor = advise.Advisor(args.workloads, args.budget_min, args.precision,
                             placer=args.where, weights=args.weights, window_s=args.window_s,
                             profile=args.profile, start=args.start)
    compose.preflight(cluster=args.where.cluster is not None)
    try:
        with locked(args):
            folder = advisor.run()
    except runner.RunInterrupted as exc:
        print(f"tierbench: interrupted by {exc}: interfaces restored; the advice so far is in "
              f"{advisor.folder}", file=sys.stderr)
        return 130
    print(f"tierbench: advice: {folder / 'advice.html'}\n"
          f"tierbench: advice: {folder / 'advice.csv'}\n{still_up(args.where)}")
    return 0


def cmd_advise_apply(args: argparse.Namespace) -> int:
    """Set an advise run's confirmed configuration, kept only when still reachable."""
    cluster = args.where.cluster
    if args.node and cluster is None:
        raise ConfigError("--node needs a cluster file (--cluster FILE or $"
                          f"{clusterfile.CLUSTER_ENV})")
    node_of(args)
    install.check_run(Path(args.run))  # its errors before the lock
    via = nodes.transport(cluster.node(args.node)) if args.node else None
    with locked(args):
        lines = install.apply_run(Path(args.run), args.interface, via or install.LOCAL,
                                  args.check_address)
    print("\n".join(f"tierbench: advise apply: {line}" for line in lines))
    return 0


def node_of(args: argparse.Namespace) -> None:
    """--node NAME checked against the cluster file (one sentence when it names none)."""
    cluster = args.where.cluster
    if args.node and cluster is not None and args.node not in [n.name for n in cluster.nodes]:
        raise ConfigError(f"--node: no node {args.node!r} in {cluster.path} (nodes: "
                          f"{', '.join(n.name for n in cluster.nodes)})")


def cmd_runs(args: argparse.Namespace) -> int:
    """List the runs under the results folder, newest first."""
    from analysis import runs

    print(runs.table(runs.runs(Path(args.results) if args.results else results_root())))
    return 0


def cmd_pfs(args: argparse.Namespace) -> int:
    """Bring the OrangeFS cluster up or down by hand, or list it."""
    if args.action == "up":
        compose.preflight()
        print(f"tierbench: starting 1 metadata + {args.io} I/O servers and {args.clients} "
              f"client(s), storage on {args.storage}", file=sys.stderr)
        orangefs.cluster_up(args.io, args.clients, strip_size=args.strip_size,
                            storage=args.storage, job_timeout_s=args.job_timeout)
    elif args.action == "down":
        args.where.down()  # the stack, then the disk systems it used (Placer.tiers_down)
        print("tierbench: removed the stack and the OrangeFS cluster", file=sys.stderr)
        return 0
    print(orangefs.status_json())
    return 0


def cmd_project(args: argparse.Namespace) -> int:
    """This checkout's Compose project name and state folder (for a plain `docker compose -p`)."""
    print(model.PROJECT if not args.state else state_dir())
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Restore interface settings a crashed run left changed and remove the stack: this
    checkout's (--all: every checkout's containers, volumes and tmpfs), never while a run holds
    this host's or a node's lock."""
    with locked(args, nodes_now=True):
        for note in runner.clean(args.where, keep_stack=args.keep_stack, every=args.all):
            print(f"tierbench: {note}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write report.html for an existing run directory."""
    run_dir = Path(args.run)
    if not (run_dir / "summary.csv").is_file():
        raise ConfigError(f"{run_dir}: no summary.csv here; give a results/<experiment>/<run-id> "
                          "folder")
    print(runner.write_report(run_dir))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare two runs of the same experiment; write the comparison page."""
    from analysis import compare, load

    try:
        print(compare.write_compare(Path(args.run_a), Path(args.run_b), args.out))
    except (load.LayoutError, compare.CompareError) as exc:
        raise ConfigError(str(exc)) from None
    return 0


def cmd_modes(args: argparse.Namespace) -> int:
    """``tierbench modes list|show|diff|check``: inspect modes; check changes nothing."""
    modes_dir = Path(getattr(args, "modes_dir", None) or MODES_DIR)
    if args.modes_command == "list":
        for m in list_modes(modes_dir):
            scope = ", ".join(m.host_interfaces or m.tiers or m.roles) or "every tier"
            restart = " (server restart)" if m.needs_restart else ""
            print(f"{m.name:<24} {m.scope}: {scope}{restart}  {m.description[:60]}")
        return 0
    if args.modes_command == "show":
        mode = load_mode(args.mode, modes_dir)
        text = yaml.safe_dump(mode.as_dict(), sort_keys=False, width=100, allow_unicode=True)
        print(text.rstrip())
        return 0
    if args.modes_command == "diff":
        a, b = load_mode(args.a, modes_dir), load_mode(args.b, modes_dir)
        lines = diff_modes(a, b)
        print("\n".join(lines) if lines else f"{a.name} and {b.name} set the same things")
        return 0
    mode = load_mode(args.mode, modes_dir)
    if mode.host_interfaces:
        eps = host_endpoints(mode)
    else:  # the tiers of whatever is running
        running = [d for k in registry.kinds().values()
                   if (d := k.running(args.where)) is not None]
        if not running:
            raise model.StackError(f"mode {mode.name}: nothing of tierbench is running; start "
                                     "the stack (tierbench run) or check a mode with "
                                     "host_interfaces")
        eps = runner.mode_endpoints(mode, running[0])
    problems = apply.check_mode(mode, eps)
    if problems:
        for p in problems:
            print(f"tierbench: {mode.name}: {p}")
        return 1
    print(f"tierbench: {mode.name}: every setting is possible on "
          f"{', '.join(ep.label for ep in eps)}; nothing was changed")
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    """Check a cluster's nodes or print their provenance (tierbench.placement.nodes), the
    cluster file validated against every kind's roles."""
    return nodes.main(args, registry.roles())


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of an experiment file (of one kind) or of a mode file."""
    if args.what == "mode":
        schema = registry.mode_schema()
    else:
        schema = registry.experiment_schema(args.kind)
    print(json.dumps(schema, indent=1, sort_keys=True))
    return 0


def add_modes_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``modes list|show|diff|check`` to the CLI's subparsers."""
    p = subparsers.add_parser("modes", help="list, show, compare or check modes")
    p.add_argument("--modes-dir", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="modes_command", required=True)
    sub.add_parser("list", help="every mode file with its scope")
    s = sub.add_parser("show", help="a mode with extends resolved")
    s.add_argument("mode")
    d = sub.add_parser("diff", help="what differs between two modes")
    d.add_argument("a")
    d.add_argument("b")
    c = sub.add_parser("check", help="capability check on the real interfaces; changes nothing")
    c.add_argument("mode")
    p.set_defaults(func=cmd_modes)


def add_cluster_arg(p: argparse.ArgumentParser) -> None:
    """--cluster FILE: run on the nodes of a cluster file."""
    p.add_argument("--cluster", metavar="FILE",
                   help=f"run on the nodes of this cluster file (default ${clusterfile.CLUSTER_ENV}, "
                        "else this host); see cluster.example.yml")


def add_rows_arg(p: argparse.ArgumentParser) -> None:
    """--rows: a part of a study (a long study run in parts, each with its own report)."""
    p.add_argument("--rows", metavar="ID[,ID]", help="only these rows of the study (e.g. "
                   "PFS-basic,DC-hybrid): a part of a long study, with its own record and "
                   "scoreboard")


def add_precision_args(p: argparse.ArgumentParser, scale: bool = True) -> None:
    """--precision PCT and its limits: run in blocks until every comparison is resolved (and
    --scale, unless ``scale`` is False)."""
    g = p.add_argument_group("precision (blocks until every comparison is resolved; overrides "
                             "the experiment's precision key and repetitions)")
    g.add_argument("--precision", type=float, metavar="PCT",
                   help="half-width of each comparison's 95 %% interval, in %% (e.g. 5)")
    g.add_argument("--decision", type=float, metavar="PCT", help="a practical threshold: a "
                   "comparison is also resolved once its interval lies above +PCT %%, below "
                   "-PCT %% or within ±PCT %%")
    g.add_argument("--metric", help="summary column the comparisons are on (default tps)")
    g.add_argument("--min-repetitions", type=int, metavar="N", help="blocks every condition "
                   "runs (default 8)")
    g.add_argument("--max-repetitions", type=int, metavar="N", help="at most this many blocks "
                   "(default 30)")
    g.add_argument("--budget-min", type=float, metavar="MIN", help="stop starting blocks when "
                   "this many minutes of measuring are spent")
    g.add_argument("--deployments", type=int, metavar="N", help="fresh bring-ups the first "
                   "blocks are spread over (default 2; later blocks go on in new ones)")
    if scale:
        p.add_argument("--scale", type=scale_arg, metavar="F", help="shorten (F < 1) the measured "
                       "windows, request counts, file sizes and repetitions by F, each no "
                       "lower than a floor the plan shows; recorded in the results")


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="tierbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run an experiment (name in experiments/ or a path)")
    r.add_argument("experiment")
    r.add_argument("--resume", metavar="RUN_DIR",
                   help="continue an interrupted run of this experiment in RUN_DIR")
    r.add_argument("--profile", choices=("categories",),
                   help="perf on every CPU per point: CPU by kernel category per tier "
                   "(docs/measurement.md)")
    add_precision_args(r)
    add_cluster_arg(r)
    r.set_defaults(func=cmd_run)
    pl = sub.add_parser("plan", help="dry run: the points in order and the estimated duration")
    pl.add_argument("experiment", nargs="?")
    pl.add_argument("--study", metavar="ID", help="every experiment of a study with its time")
    add_rows_arg(pl)
    add_precision_args(pl)
    add_cluster_arg(pl)
    pl.set_defaults(func=cmd_plan)
    st = sub.add_parser("study", help="run every experiment of a study (000-004) and write the "
                        "study's report")
    st.add_argument("study", metavar="ID", help="000, 001, 002, 003 or 004")
    st.add_argument("--scale", type=scale_arg, metavar="F", help="shorten every experiment (as "
                    "run --scale), or `recommended`: each row at its study file's recommended "
                    "scale, repetitions kept (rows without one left out)")
    st.add_argument("--resume", metavar="STUDY_DIR",
                    help="continue an interrupted study in results/study-ID/<run-id>")
    add_rows_arg(st)
    add_precision_args(st, scale=False)
    add_cluster_arg(st)
    st.set_defaults(func=cmd_study)
    cl = sub.add_parser("claims", help="the papers' claims checked on recorded runs (a run of "
                        "an experiment, or a study's folder)")
    cl.add_argument("runs", nargs="+", metavar="RESULTS",
                    help="results/<experiment>/<run-id> or results/study-ID/<run-id>")
    cl.add_argument("--as", dest="as_experiment", metavar="EXPERIMENT",
                    help="check a run of another experiment against EXPERIMENT's claims (its "
                         "conditions must be in the run: quick for dc-single)")
    cl.add_argument("--markdown", action="store_true",
                    help="one paragraph per run, as docs/fidelity.md's scoreboards")
    cl.add_argument("--csv", metavar="PATH", help="also write every line to PATH (claims.csv)")
    cl.set_defaults(func=cmd_claims)
    ad = sub.add_parser("advise", help="which offloads to turn on for which workload, measured "
                        "on these interfaces (docs/advise.md)")
    ad.add_argument("--budget-min", type=float, default=60.0, metavar="MIN",
                    help="minutes of measuring over every workload (default 60: the first "
                    "workload at 10-s windows; the whole suite needs hours)")
    ad.add_argument("--workloads", nargs="+", metavar="NAME",
                    help="only these workloads of experiments/advise/suite.yml")
    ad.add_argument("--precision", type=float, default=5.0, metavar="PCT",
                    help="half-width of each comparison's 95 %% interval asked for, in %% "
                         "(default 5)")
    ad.add_argument("--window-s", type=float, metavar="S", help="every workload's measured "
                    "window (default: the suite's, 10 s; shorter buys more blocks of less "
                    "worth)")
    ad.add_argument("--weights", metavar="NAME=W,...",
                    help="the workloads' weights in the merged configuration (default equal)")
    ad.add_argument("--profile", choices=("categories",),
                    help="perf on every CPU per point of every run: each recommendation says "
                    "what moved by kernel category (docs/advise.md)")
    ad.add_argument("--from", dest="start", metavar="MODE",
                    help="start from this mode's interface settings (a mode of modes/, e.g. "
                    "offloads-off) instead of the interfaces as they are: every point sets it "
                    "under the rollback guard and puts the interfaces back after; the advice "
                    "says what to change from it (docs/advise.md)")
    add_cluster_arg(ad)
    ad.set_defaults(func=cmd_advise)
    ads = ad.add_subparsers(dest="advise_action", metavar="apply")
    aa = ads.add_parser("apply", help="set an advise run's confirmed configuration, kept only "
                        "when the controller still reaches the interfaces (docs/advise.md)")
    aa.add_argument("run", metavar="RUN", help="the advise run's folder "
                    "(results/advise/<run-id>)")
    aa.add_argument("--node", metavar="NAME", help="a node of the cluster file (default: "
                    "this host)")
    aa.add_argument("--interface", nargs="+", metavar="IF", help="set these interfaces "
                    "(default: those the configuration lists on the host or node)")
    aa.add_argument("--check-address", metavar="ADDR[:PORT]", help="also an address that "
                    "must answer after the change: a ping through the interface, or a TCP "
                    "connection to PORT")
    add_cluster_arg(aa)
    aa.set_defaults(func=cmd_advise_apply)
    rs = sub.add_parser("runs", help="every run under the results folder, newest first "
                        "(studies and advise sessions too)")
    rs.add_argument("--results", metavar="DIR", help="results folder (default "
                    "$TIERBENCH_RESULTS, else results/)")
    rs.set_defaults(func=cmd_runs)
    c = sub.add_parser("clean", help="restore interfaces left changed and remove the stack")
    c.add_argument("--keep-stack", action="store_true",
                   help="only restore interface settings; leave the containers running")
    c.add_argument("--all", action="store_true",
                   help="remove every checkout's stack (containers, networks, volumes, tmpfs) "
                        f"on this host or the nodes, not only this checkout's ({model.PROJECT})")
    add_cluster_arg(c)
    c.set_defaults(func=cmd_clean)
    pj = sub.add_parser("project", help="this checkout's Compose project name (docker compose -p "
                                         "NAME reaches its stack)")
    pj.add_argument("--state", action="store_true", help="its state folder instead")
    pj.set_defaults(func=cmd_project)
    rp = sub.add_parser("report", help="(re)write report.html of a run directory")
    rp.add_argument("run")
    rp.set_defaults(func=cmd_report)
    add_modes_parser(sub)
    pf = sub.add_parser("pfs", help="the OrangeFS cluster by hand: up, down, status")
    pf.add_argument("action", choices=("up", "down", "status"))
    pf.add_argument("--io", type=int, default=2, help="I/O servers, 1-8 (default 2)")
    pf.add_argument("--clients", type=int, default=1, help="client containers (default 1)")
    pf.add_argument("--storage", choices=orangefs.STORAGE, default="tmpfs")
    pf.add_argument("--strip-size", type=int, default=65536, help="bytes (default 65536)")
    pf.add_argument("--job-timeout", type=int, default=15, help="seconds (default 15)")
    pf.set_defaults(func=cmd_pfs)
    for kind in registry.kinds().values():  # each kind's own subcommands (Kind.commands)
        for command in kind.commands:
            k = sub.add_parser(command.name, help=command.help)
            command.arguments(k)
            k.set_defaults(func=command.run)
    nd = sub.add_parser("nodes", help="check a cluster's nodes, or print their provenance "
                        "(changes nothing)")
    nodes.add_arguments(nd)
    nd.set_defaults(func=cmd_nodes)
    sc = sub.add_parser("schema", help="the JSON Schema of experiment or mode files (for editors)")
    sc.add_argument("what", choices=("experiment", "mode"))
    sc.add_argument("--kind", default="web", help="workload kind of the experiment (default web)")
    sc.set_defaults(func=cmd_schema)
    cp = sub.add_parser("compare", help="compare two runs of the same experiment (A, then B)")
    cp.add_argument("run_a")
    cp.add_argument("run_b")
    cp.add_argument("-o", "--out", type=Path, help="output file (default RUN_B/compare-<A>.html)")
    cp.set_defaults(func=cmd_compare)
    return p


def placement(args: argparse.Namespace) -> placer.Placer:
    """Where the command's services run: the nodes of --cluster FILE (or $TIERBENCH_CLUSTER) for
    a command that takes it, else this host. Made once, and handed to what the command runs."""
    path = clusterfile.cluster_path(args.cluster) if hasattr(args, "cluster") else None
    if path is not None:
        return ClusterPlacer(clusterfile.load_cluster(path, registry.roles()))
    return local.LocalPlacer()


def main(argv: list[str] | None = None) -> int:
    """Entry point: errors a user can fix are one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    try:
        if model.PROJECT_PROBLEM:
            raise ConfigError(model.PROJECT_PROBLEM)
        args.where = placement(args)
        return args.func(args)
    except TierbenchError as exc:
        print(f"tierbench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tierbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
