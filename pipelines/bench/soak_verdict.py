"""The soak's rows and verdict (``scinol bench soak``): a row's figures,
whether memory and checkpoint size stayed flat after the warm-up, and the
lines printed for both."""

from __future__ import annotations

from pipelines.bench.soak_processes import LOAD

TOLERANCE = 0.10
"""Largest deviation, after the warm-up, that counts as flat."""


def make_row(end_s: float, seconds: float, latencies: list[float], predicted: int, offered: int, lag_events: int,
             rss: dict[str, float], checkpoint: dict, load: float) -> dict:
    """One row's figures from what was measured over its ``seconds``."""
    import numpy as np

    lat = np.asarray(latencies, float)
    pct = np.percentile(lat, [50, 99]).tolist() if lat.size else [float("nan")] * 2
    return {"minute": end_s / 60, "seconds": seconds, "offered_per_s": offered / seconds,
            "predicted_per_s": predicted / seconds, "p50_ms": pct[0], "p99_ms": pct[1], "lag": lag_events,
            "rss_mib": rss, "checkpoint": checkpoint, "load_average": load}


def deviation(values: list[float]) -> tuple[float, float]:
    """(largest |v / first - 1|, last / first - 1) of a series."""
    first = values[0]
    return max(abs(v / first - 1) for v in values), values[-1] / first - 1


def verdict(rows: list[dict], warmup_minutes: float, tolerance: float = TOLERANCE) -> dict:
    """Each process's RSS and the checkpoint size over the rows after the
    warm-up, beside the first of them: flat when no row is more than
    ``tolerance`` away. The load producer is shown, not judged."""
    after = [r for r in rows if r["minute"] - r["seconds"] / 60 >= warmup_minutes - 1e-9]
    if len(after) < 2:
        return {"rows_after_warmup": len(after), "flat": None,
                "why": "fewer than two rows after the warm-up: nothing to compare"}
    series = {name: [r["rss_mib"][name] for r in after if name in r["rss_mib"]]
              for name in sorted({n for r in after for n in r["rss_mib"]})}
    sizes = [r["checkpoint"]["size_bytes"] for r in after if r["checkpoint"].get("size_bytes")]
    if len(sizes) >= 2:
        series["checkpoint size"] = sizes
    judged = {}
    for name, values in series.items():
        worst, growth = deviation(values)
        judged[name] = {"first": values[0], "last": values[-1], "max": max(values), "max_deviation": worst,
                        "growth": growth, "rows": len(values), "flat": worst <= tolerance,
                        "judged": name != LOAD}
    flat = all(j["flat"] for j in judged.values() if j["judged"])
    return {"rows_after_warmup": len(after), "tolerance": tolerance, "flat": flat, "series": judged,
            "checkpoint_size_judged": "checkpoint size" in judged, "steps": step_growth(after)}


def step_growth(rows: list[dict]) -> dict[str, dict]:
    """Each step's checkpointed state in the first and the last row that has
    it, largest growth first."""
    have = [r["checkpoint"].get("by_step") or {} for r in rows]
    have = [steps for steps in have if steps]
    if len(have) < 2:
        return {}
    grown = {name: {"first": have[0][name], "last": have[-1][name]} for name in have[-1] if name in have[0]}
    return dict(sorted(grown.items(), key=lambda kv: kv[1]["first"] - kv[1]["last"]))


SHORT = {"jobmanager": "JM", "worker pool": "pool", "broker": "kafka", "scinol run": "run", "job server": "jobsrv",
         LOAD: "load"}


def short_name(name: str) -> str:
    if name.startswith("taskmanager ("):
        return name[len("taskmanager ("):-1].upper()
    if name.startswith("python worker ("):
        return "py-" + name[len("python worker ("):-1]
    return SHORT.get(name, name)


def row_line(r: dict) -> str:
    c = r["checkpoint"]
    done = "none completed"
    if c.get("id") is not None:
        done = f"#{c['id']} {c['size_bytes'] / 1024:,.0f} KiB, {c['duration_ms']:,} ms"
    rss = " ".join(f"{short_name(n)} {v:,.0f}" for n, v in r["rss_mib"].items())
    return (f"{r['minute']:5.1f} | {r['offered_per_s']:7,.0f} | {r['predicted_per_s']:7,.0f} | {r['p50_ms']:6.0f} | "
            f"{r['p99_ms']:6.0f} | {r['lag']:6,} | {done} ({c['failed']} failed) | {r['load_average']:4.1f} | {rss}")


ROW_HEAD = "  min | offer/s |  pred/s | p50 ms | p99 ms |    lag | last completed Flink checkpoint | load | RSS MiB"


def verdict_lines(v: dict) -> list[str]:
    if v["flat"] is None:
        return [f"verdict: {v['why']}"]
    out = [f"after the warm-up ({v['rows_after_warmup']} rows), against its first row "
           f"(flat: every row within {v['tolerance']:.0%}):"]
    for name, j in v["series"].items():
        unit = "KiB" if name == "checkpoint size" else "MiB"
        scale = 1024 if name == "checkpoint size" else 1
        out.append(f"  {name}: {j['first'] / scale:,.0f} -> {j['last'] / scale:,.0f} {unit} "
                   f"(max {j['max'] / scale:,.0f}), max deviation {j['max_deviation']:.1%}, growth {j['growth']:+.1%}: "
                   f"{'flat' if j['flat'] else 'NOT flat'}{'' if j['judged'] else ' (not judged: the load)'}")
    if not v["checkpoint_size_judged"]:
        out.append("  checkpoint size: fewer than two completed checkpoints after the warm-up: not judged")
    for name, g in list(v.get("steps", {}).items())[:3]:
        out.append(f"    checkpointed state of {name[:70]}: {g['first'] / 1024:,.0f} -> {g['last'] / 1024:,.0f} KiB")
    out.append(f"verdict: memory and checkpoint size {'FLAT' if v['flat'] else 'NOT FLAT'} within "
               f"{v['tolerance']:.0%} after the warm-up")
    return out
