"""``scinol bench accuracy``, ``throughput``, ``scaling`` and ``soak``: the command-line
side; the benchmarks themselves are in :mod:`pipelines.bench`."""

from __future__ import annotations

import shlex

from .errors import UsageError


def _names(text: str | None):
    """"a,b" → ("a", "b"); "none" → (); None → None (the default set)."""
    if text is None:
        return None
    return () if text.strip().lower() == "none" else tuple(n.strip() for n in text.split(",") if n.strip())


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: the paper's experiments, accuracy and speed vs VW and River",
                       description="Writes OUT/benchmarks.md (its own sections only) and PNGs beside it.")
    p.set_defaults(func=run)
    bsub = p.add_subparsers(dest="bench_command", required=True, parser_class=type(p))
    _add_accuracy_parser(bsub)
    _add_throughput_parser(bsub)
    _add_scaling_parser(bsub)
    _add_soak_parser(bsub)


def _add_accuracy_parser(bsub) -> None:
    a = bsub.add_parser("accuracy", help="toy experiment (Kempka et al. 2019 Fig. 1) and test curves on real data (Fig. 2)",
                        description="The paper's §4.1 toy and §4.2 multi-pass test curves on every bundled data "
                                    "set, ScInOL beside tuned baselines, Vowpal Wabbit and River (when installed).")
    a.add_argument("--out", default="docs", help="directory for benchmarks.md and the PNGs (default: docs)")
    a.add_argument("--quick", action="store_true", help="a smoke test: 2 runs, 2 passes, 2 learning rates, "
                                                        "breast cancer and wine only, a small toy")
    a.add_argument("--runs", type=int, help="runs per data set (default 10)")
    a.add_argument("--toy-runs", type=int, help="toy training sets (default 10)")
    a.add_argument("--tune-runs", type=int, help="runs each grid value gets before the best is chosen "
                                                 "(default 3; with --one-pass, 1 shuffle)")
    a.add_argument("--epochs", type=int, help="passes over each training set (default: per data set)")
    a.add_argument("--lr-grid", metavar="LR,LR,...", help="learning rates the tuned methods try on real data "
                                                          "(default: the union of the paper's two grids, 1e-5..10)")
    a.add_argument("--datasets", metavar="A,B,...", help="bundled data sets to run, or 'none' (default: all)")
    a.add_argument("--no-toy", action="store_true", help="skip the toy experiment")
    a.add_argument("--paper-data", metavar="DIR", help="also run the paper's data sets read from DIR "
                                                       "(one sub-folder per set, as pipelines/bench/paper_data.py describes; never copied)")
    a.add_argument("--paper-sets", metavar="A,B,...", help="with --paper-data: which (default: all found)")
    a.add_argument("--no-vw", action="store_true", help="leave Vowpal Wabbit out")
    a.add_argument("--no-river", action="store_true", help="leave River out")
    a.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    a.add_argument("--one-pass", action="store_true",
                   help="instead: one untuned pass over every data set (3 shuffles), our learners beside VW "
                        "default, VW --coin, River default and River+StandardScaler and the zero model, plus the "
                        "test-tuned best; progressive and test loss and error, ratios checked against targets")
    a.add_argument("--learners", metavar="A,B,...",
                   help="with --one-pass: our learners by registry name, each optionally NAME:KEY=VALUE[:KEY=VALUE] "
                        "(default: scinol-mix,scinol2; unregistered ones are noted and left out)")


def _add_throughput_parser(bsub) -> None:
    t = bsub.add_parser("throughput", help="examples/s: kernels vs VW, `scinol learn` vs VW's driver, "
                                           "pipeline vs a plain Kafka loop",
                        description="Speed side by side, with ratios.")
    t.add_argument("--out", default="docs", help="directory of benchmarks.md (default: docs)")
    t.add_argument("--rows", type=int, default=1_000_000, help="dense rows for the kernel figures")
    t.add_argument("--sparse-rows", type=int, default=1_000_000, help="sparse rows for the kernel figures")
    t.add_argument("--repeats", type=int, default=3, help="best of N (default 3)")
    t.add_argument("--learn-rows", type=int, default=400_000, help="dense rows for `scinol learn` vs VW's driver")
    t.add_argument("--learn-sparse-rows", type=int, default=100_000,
                   help="sparse rows (50 of 2^20) for `scinol learn` vs VW's driver")
    t.add_argument("--pipeline-events", type=int, default=100_000, help="dense events through the pipeline")
    t.add_argument("--pipeline-sparse-events", type=int, default=50_000, help="sparse events through the pipeline")
    t.add_argument("--no-vw", action="store_true", help="leave Vowpal Wabbit out")
    t.add_argument("--no-pipeline", action="store_true", help="skip the Kafka pipeline figures")


def _add_scaling_parser(bsub) -> None:
    from pipelines.bench.scaling import add_arguments

    s = bsub.add_parser("scaling", help="Flink with 1 and 2 TaskManagers, each with the same CPU quota: "
                                        "events/s, CPU per event, spread",
                        description="Needs root (CPU control groups). Prints a table; --json writes the figures.")
    add_arguments(s)


def _add_soak_parser(bsub) -> None:
    from pipelines.bench.soak import add_arguments

    k = bsub.add_parser("soak", help="an unbounded run on a Flink session cluster at a fixed offered rate with "
                                     "checkpoints: a row a minute (events/s, latency, lag, checkpoint, RSS of "
                                     "every process), then whether memory and checkpoint size stayed flat",
                        description="Starts Apache Kafka, a Flink session cluster and `scinol run --runner flink`, "
                                    "offers --rate events/s for --minutes; prints a row per --row-seconds and a "
                                    "verdict; --json writes the figures. Not a test: 30 minutes by default.")
    add_arguments(k)


def _positive(args, names) -> None:
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"bench {args.bench_command}: --{name.replace('_', '-')} must be at least 1, not {value}")


def _known_names(datasets, paper_sets, paper_dir) -> None:
    from pipelines.bench.datasets import BUNDLED
    from pipelines.bench.paper_data import LOADERS
    for given, known, what in ((datasets, BUNDLED, "data set"), (paper_sets, LOADERS, "paper data set")):
        for name in given or ():
            if name not in known:
                raise UsageError(f"bench accuracy: unknown {what} {name!r}; choose from {', '.join(known)}")
    if paper_sets is not None and not paper_dir:
        raise UsageError("bench accuracy: --paper-sets needs --paper-data DIR")


def _command_line(argv_tail) -> str:
    """The command as the report shows it; a --paper-data folder is shown as DIR
    (where the data sit on one machine is no part of the result)."""
    shown = []
    for a in argv_tail:
        if shown and shown[-1] == "--paper-data":
            a = "DIR"
        elif a.startswith("--paper-data="):
            a = "--paper-data=DIR"
        shown.append(a)
    return "scinol bench " + " ".join(shlex.quote(a) for a in shown)


def _grid(text: str) -> tuple:
    try:
        grid = tuple(float(v) for v in _names(text))
    except ValueError:
        raise UsageError(f"bench accuracy: --lr-grid {text!r}: expected numbers like 0.01,0.1,1") from None
    if not grid or min(grid) <= 0:
        raise UsageError(f"bench accuracy: --lr-grid {text!r}: expected positive numbers")
    return grid


def _check_learners(specs) -> None:
    """Each registered learner named with parameters must accept them (an
    unregistered name is the benchmark's to note and leave out)."""
    from learners import make_learner
    from learners.registry import learner_names
    from pipelines.bench.contenders import parse_spec

    for spec in specs:
        try:
            name, params = parse_spec(spec)
            if name in learner_names():
                make_learner(name, "logistic", **params)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bench accuracy: --learners {spec}: {exc}") from None


def _one_pass(args, command: str) -> int:
    from dataclasses import replace

    from pipelines.bench.accuracy import run_accuracy_one_pass
    from pipelines.bench.one_pass import QUICK_ONE_PASS, OnePassSettings

    for name in ("toy_runs", "epochs"):
        if getattr(args, name) is not None:
            raise UsageError(f"bench accuracy: --{name.replace('_', '-')} does not apply to --one-pass")
    _positive(args, ["runs", "tune_runs", "jobs"])
    s = QUICK_ONE_PASS if args.quick else OnePassSettings()
    overrides = {k: getattr(args, k) for k in ("runs", "tune_runs") if getattr(args, k) is not None}
    if args.datasets is not None:
        overrides["datasets"] = _names(args.datasets)
    if args.lr_grid is not None:
        overrides["lr_grid"] = _grid(args.lr_grid)
    if args.learners is not None:
        overrides["learners"] = _names(args.learners)
        if not overrides["learners"]:
            raise UsageError("bench accuracy: --learners: name at least one learner")
        _check_learners(overrides["learners"])
    s = replace(s, **overrides)
    paper_sets = _names(args.paper_sets)
    _known_names(s.datasets, paper_sets, args.paper_data)
    return run_accuracy_one_pass(args.out, s, args.quick, args.paper_data, paper_sets, args.no_vw, args.no_river,
                                 args.jobs, command)


def run(args) -> int:
    """The report records the command line as parsed (``args.argv``)."""
    argv = args.argv
    tail = argv[argv.index("bench") + 1:] if "bench" in argv else [args.bench_command]
    if args.bench_command == "accuracy" and args.one_pass:
        return _one_pass(args, _command_line(tail))
    if args.bench_command == "accuracy":
        from dataclasses import replace

        from pipelines.bench.accuracy import QUICK, Settings, run_accuracy

        _positive(args, ["runs", "toy_runs", "tune_runs", "epochs", "jobs"])
        s = QUICK if args.quick else Settings()
        overrides = {k: getattr(args, k) for k in ("runs", "toy_runs", "tune_runs", "epochs")
                     if getattr(args, k) is not None}
        if args.datasets is not None:
            overrides["datasets"] = _names(args.datasets)
        if args.lr_grid is not None:
            overrides["lr_grid"] = _grid(args.lr_grid)
        if args.learners is not None:
            raise UsageError("bench accuracy: --learners needs --one-pass")
        s = replace(s, **overrides)
        paper_sets = _names(args.paper_sets)
        _known_names(s.datasets, paper_sets, args.paper_data)
        return run_accuracy(args.out, s, args.quick, not args.no_toy, args.paper_data, paper_sets,
                            args.no_vw, args.no_river, args.jobs, _command_line(tail))
    if args.bench_command == "scaling":
        from pipelines.bench.scaling import check, run_scaling

        why = check(args)
        if why is not None:
            raise UsageError(f"bench scaling: {why}")
        return run_scaling(args)
    if args.bench_command == "soak":
        from pipelines.bench.soak import check as check_soak, run_soak

        why = check_soak(args)
        if why is not None:
            raise UsageError(f"bench soak: {why}")
        return run_soak(args)
    from pipelines.bench.throughput import run_throughput

    _positive(args, ["rows", "sparse_rows", "repeats", "learn_rows", "learn_sparse_rows", "pipeline_events", "pipeline_sparse_events"])
    return run_throughput(args, _command_line(tail))
