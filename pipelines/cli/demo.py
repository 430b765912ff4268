"""``scinol demo``: the main job on the embedded default, end to end.

Starts the embedded broker, streams a real data set (the Wisconsin breast
cancer data that ships with scikit-learn: 569 tumours, 30 measurements on
scales from 1e-3 to 1e3, used as is — no normalisation) for several shuffled
passes into a topic, runs the exact-mode pipeline bounded with ScInOL2, and
ends by showing where the predictions, the checkpoint and a learning curve
are.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import numpy as np


def load_breast_cancer_stream(passes: int, seed: int = 0):
    """(X, y) of ``passes`` shuffled copies of the data set, labels ±1 (+1 = benign)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(data.target)) for _ in range(passes)])
    return data.data[order], np.where(data.target[order] == 1, 1.0, -1.0), order




def learning_curve_png(path: str, losses: np.ndarray, n_rows: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(1, len(losses) + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, np.cumsum(losses) / t, label="progressive mean loss (ScInOL2)")
    window = min(len(losses), n_rows)
    moving = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax.plot(np.arange(window, len(losses) + 1), moving, label=f"mean over the last {window} events")
    ax.axhline(np.log(2), color="k", ls="--", lw=0.8, label="zero model (ln 2)")
    ax.set_xlabel("events")
    ax.set_ylabel("logistic loss")
    ax.set_title("scinol demo: breast cancer stream, no normalisation, no learning rate")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _say(text: str) -> None:
    print(f"[demo] {text}", file=sys.stderr, flush=True)


def _fresh_checkpoints(out_dir: str) -> str:
    """The demo's checkpoint folder, emptied: its embedded broker keeps
    nothing between runs, so a previous run's checkpoints describe a stream
    that no longer exists."""
    checkpoints = os.path.join(out_dir, "checkpoints")
    if os.path.isdir(checkpoints):
        shutil.rmtree(checkpoints)
        _say(f"starting fresh: removed the previous run's {checkpoints}")
    os.makedirs(checkpoints)
    return checkpoints


def _stream_and_learn(bootstrap: str, X, y, passes: int, checkpoints: str):
    from pipelines.config import LearnerConfig, RunConfig
    from pipelines.launch import run
    from pipelines.records.events import dense_events
    from pipelines.records.topics import produce_events

    events = dense_events(X, y, "breast-cancer-", model="breast-cancer")
    count, rate = produce_events(bootstrap, "demo.events", events, partitions=1, total=len(y))
    _say(f"streamed {count:,} events ({passes} shuffled passes over 569 rows, 30 raw features) "
         f"into topic demo.events at {rate:,.0f} events/s")
    cfg = RunConfig(bootstrap=bootstrap, topic="demo.events", predictions_topic="demo.predictions",
                    learner=LearnerConfig("scinol2", "logistic"), bounded=True, checkpoint_dir=checkpoints,
                    checkpoint_every=2000, progress_seconds=2.0)
    _say("running the pipeline (bounded, exact mode, ScInOL2, logistic loss)")
    t0 = time.monotonic()
    run(cfg)
    _say(f"pipeline done in {time.monotonic() - t0:.1f} s")
    return cfg


def _show(bootstrap: str, cfg, y, out_dir: str) -> None:
    from pipelines.records.topics import read_records
    from pipelines.state.checkpoints import CheckpointStore

    predictions = read_records(bootstrap, cfg.predictions_topic, len(y))
    by_id = {p["event_id"]: p for p in predictions}
    ids = [f"breast-cancer-{i}" for i in range(len(y))]
    losses = np.array([by_id[i]["loss"] for i in ids if i in by_id])
    acc_last = np.mean([(by_id[i]["score"] > 0) == (label > 0) for i, label in zip(ids[-569:], y[-569:])])
    png = os.path.join(out_dir, "learning_curve.png")
    learning_curve_png(png, losses, 569)
    ckpt = CheckpointStore(cfg.checkpoint_dir).latest("breast-cancer")
    last = predictions[-1]
    print(f"\npredictions: {len(predictions):,} records in topic {cfg.predictions_topic} on {bootstrap}"
          f" (e.g. {last['event_id']}: score {last['score']:+.4f}, P(benign) {last['probability']:.3f})")
    print(f"progressive mean loss {losses.mean():.4f} (zero model {np.log(2):.4f}); "
          f"accuracy over the last pass {acc_last:.3f}")
    print(f"checkpoint:  {ckpt.path} ({ckpt.event_count:,} events; inspect with "
          f"`scinol model inspect {ckpt.path}`)")
    print(f"curve:       {os.path.abspath(png)}")


def _wait_for_ctrl_c(broker) -> None:
    print(f"\nbroker still up at {broker.bootstrap}: `scinol tail demo.predictions --bootstrap "
          f"{broker.bootstrap}`; Ctrl-C to stop")
    try:
        while broker.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def run_demo(out_dir: str = "scinol-demo", passes: int = 20, keep_broker: bool = False) -> int:
    started = time.monotonic()
    os.makedirs(out_dir, exist_ok=True)
    checkpoints = _fresh_checkpoints(out_dir)
    X, y, _ = load_breast_cancer_stream(passes)
    from pipelines.kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        _say(f"embedded broker (tansu) at {broker.bootstrap}")
        cfg = _stream_and_learn(broker.bootstrap, X, y, passes, checkpoints)
        _show(broker.bootstrap, cfg, y, out_dir)
        print(f"total time   {time.monotonic() - started:.1f} s")
        if keep_broker:
            _wait_for_ctrl_c(broker)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the main job: embedded broker, a real data stream, the pipeline, "
                                    "predictions, a checkpoint and a learning curve",
                       description="Streams scikit-learn's breast cancer data (raw, unnormalised) through the "
                                   "pipeline on an embedded broker.")
    p.add_argument("--out", default="scinol-demo", help="directory for checkpoints and the plot")
    p.add_argument("--passes", type=int, default=20, help="shuffled passes over the 569 rows (default 20)")
    p.add_argument("--keep-broker", action="store_true", help="keep the broker up afterwards, until Ctrl-C")
    p.set_defaults(func=lambda args: run_demo(args.out, args.passes, args.keep_broker))
