"""``scinol learners``: the table of learners, their parameters and properties."""

from __future__ import annotations


def run(args) -> int:
    from learners.registry import describe_learners

    rows = describe_learners()
    print(f"{'learner':<12} {'free':<5} {'inv':<5} {'shard':<6} {'parameters':<46} description")
    for r in rows:
        params = ", ".join(f"{k}={v:g}" for k, v in r["params"].items()) or "-"
        flags = ["yes" if r[f] else "no" for f in ("parameter_free", "scale_invariant", "shardable")]
        print(f"{r['name']:<12} {flags[0]:<5} {flags[1]:<5} {flags[2]:<6} {params:<46} {r['summary']}")
    print("\nfree: no learning rate to tune; inv: predictions invariant to rescaling each feature; "
          "shard: coordinate-separable (runs over feature shards)")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("learners", help="list the learners, their parameters and properties",
                   description="Every learner usable with --learner / make_learner(name).")
    p.set_defaults(func=run)
