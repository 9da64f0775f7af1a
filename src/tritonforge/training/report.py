"""HTML reports of runs: curves, before/after tables, sample trajectories; and run comparisons.

Covers: `write_report(run_dir)` (plots from metrics.jsonl into RUN_DIR/plots, RUN_DIR/report.html
with the before/after table from summary.json and a few trajectories from rollouts/) and
`write_comparison(out_dir, runs)` (one page overlaying several runs). Self-contained HTML
(plots embedded as base64 PNG). Does not cover: producing the data.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from tritonforge.training.episodes import EPISODE_KEYS

_SPLIT = ("wall_s", "generate_s", "judge_s", "judge_queue_s", "judge_correctness_s",
          "judge_timing_s", "judge_unsplit_s", "train_s", "sync_s", "idle_s")  # fmt: skip
# (file name, title, metric keys): one plot each, one line per key (and per run)
CURVES: list[tuple[str, str, tuple[str, ...]]] = [
    ("reward", "mean reward (rollouts)", ("reward",)),
    ("pass", "pass rate (rollouts)", ("pass",)),
    ("speedup", "speedup of correct turns (geomean, rollouts)", ("speedup",)),
    ("repair", "repair rate (rollouts)", ("repair",)),
    ("split", "where each step's wall time goes (s; stages overlap)", _SPLIT),
    ("gpu_busy", "GPU busy fraction (NVML)", ("gpu_busy",)),
    ("wall_over_slowest", "step wall / its slowest stage", ("wall_over_slowest",)),
    ("gen_tokens_per_s", "generation tokens/s", ("gen_tokens_per_s",)),
    ("verdicts_per_min", "verdicts per minute", ("verdicts_per_min",)),
    ("memory", "memory peaks (GiB)", ("gpu_mem_peak_gib", "device_mem_peak_gib", "host_rss_gib")),
    ("guard_scale", "step guard: share of the step kept", ("guard_scale",)),
    ("loss", "loss", ("loss",)),
    ("kl", "KL to reference", ("kl",)),
    ("clip_fraction", "clip fraction", ("clip_fraction",)),
    ("entropy", "entropy", ("entropy",)),
    ("logprob_gap", "rollout-vs-train logprob gap", ("logprob_gap",)),
    ("grad_norm", "grad norm", ("grad_norm",)),
    ("zero_variance", "zero-variance group share", ("zero_variance",)),
    ("tokens_per_s", "train tokens/s", ("tokens_per_s",)),
    ("gen_s", "rollout seconds", ("gen_s",)),
]


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return base64.b64encode(buf.getvalue()).decode()


def plot_curves(
    series: dict[str, list[dict[str, float]]], plots_dir: Path | None = None
) -> list[tuple[str, str]]:
    """One small plot per entry of CURVES with data in any series (a line per key and run);
    returns [(title, base64 png)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for name, title, keys in CURVES:
        lines = [
            (
                f"{run}: {key}" if len(series) > 1 else key,
                [(r["step"], r[key]) for r in rows if key in r],
            )
            for run, rows in series.items()
            for key in keys
        ]
        lines = [(label, pts) for label, pts in lines if pts]
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(4.2, 2.8))
        for label, pts in lines:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if len(lines) > 1:
            ax.legend(fontsize=6)
        fig.tight_layout()
        data = _png(fig)
        if plots_dir is not None:
            plots_dir.mkdir(parents=True, exist_ok=True)
            fig.savefig(plots_dir / f"{name}.png", dpi=110)
        plt.close(fig)
        out.append((title, data))
    return out


def _table(rows: list[list[Any]], head: list[str]) -> str:
    def cell(x: Any) -> str:
        return f"{x:.3f}" if isinstance(x, float) else html.escape(str(x))

    body = "".join("<tr>" + "".join(f"<td>{cell(x)}</td>" for x in r) + "</tr>" for r in rows)
    return (
        "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + f"</tr>{body}</table>"
    )


def _before_after_table(b: dict[str, Any], a: dict[str, Any]) -> str:
    keys = [k for k in EPISODE_KEYS if k in b and k in a]
    names = {"first_turn_pass": "pass@turn1", "pass_at_turn2": "pass@turn2"}
    rows = [[names.get(k, k), b[k], a[k], a[k] - b[k]] for k in keys]
    return _table(rows, ["metric", "before RL", "after RL", "change"])


def before_after(summary: dict[str, Any]) -> str:
    """Before/after tables: the training problems, then each extra measured set."""
    before, after = summary.get("before") or {}, summary.get("after") or {}
    b, a = before.get("overall"), after.get("overall")
    if not b or not a:
        return "<p>No before/after measurement in this run.</p>"
    parts = [_before_after_table(b, a)]
    for name, sb in (before.get("sets") or {}).items():
        sa = (after.get("sets") or {}).get(name)
        if sa:
            parts.append(f"<h3>{html.escape(name)}</h3>")
            parts.append(_before_after_table(sb["overall"], sa["overall"]))
    parts.append(
        "<p>repair_rate = P(second turn correct | first turn not correct); repair_attempts is "
        "its denominator.</p>"
    )
    return "\n".join(parts)


def accounting_table(summary: dict[str, Any]) -> str:
    """The run's split of step time (training.accounting.aggregate) and GPU busy fraction."""
    acc = summary.get("accounting") or {}
    if not acc.get("steps_counted"):
        return "<p>No accounting in this run.</p>"
    busy = acc.get("gpu_busy_fraction")
    rows = [[f"mean {k} (s)", v] for k, v in (acc.get("mean_s") or {}).items()]
    rows += [
        ["step wall / slowest stage (median)", acc.get("step_over_slowest_stage")],
        ["GPU busy fraction", busy if busy is not None else acc.get("gpu_busy_reason") or "-"],
        ["timing gate held by", acc.get("timing_gate") or "none (the judge does not share it)"],
    ]
    counted = f"steps from {acc.get('first_step_counted', 0)} ({acc['steps_counted']} steps)"
    return f"<p>Over {html.escape(counted)}:</p>" + _table(rows, ["figure", "value"])


def sample_trajectories(run_dir: Path, n: int = 3) -> str:
    files = sorted((run_dir / "rollouts").glob("step_*.jsonl"))
    if not files:
        return "<p>No rollouts saved.</p>"
    parts = []
    for path in (files[0], files[-1]) if len(files) > 1 else files:
        groups = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        trajs = [t for g in groups for t in g["trajectories"]][:n]
        parts.append(f"<h3>{html.escape(path.stem)}</h3>")
        for t in trajs:
            parts.append(
                f"<details><summary>{html.escape(t['problem_id'])} sample {t['sample_index']} (return {t['turns'][0]['ret'] if t['turns'] else 0:.3f})</summary>"
            )
            for turn in t["turns"]:
                v = turn.get("verdict") or {}
                parts.append(
                    f"<p><b>turn {turn['index']}</b>: {html.escape(str(v.get('status')))} reward {turn['reward']:.3f}</p>"
                )
                parts.append(f"<pre>{html.escape(turn['response_text'][:3000])}</pre>")
                if turn.get("feedback_text"):
                    parts.append(f"<pre class=fb>{html.escape(turn['feedback_text'][:1500])}</pre>")
            parts.append("</details>")
    return "\n".join(parts)


_STYLE = "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}img{margin:4px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}pre{background:#f6f6f6;white-space:pre-wrap;font-size:12px}pre.fb{background:#fff6e6}</style>"


def write_report(run_dir: str | Path) -> Path:
    """RUN_DIR/report.html (+ RUN_DIR/plots/*.png)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory")
    summary = (
        json.loads((run_dir / "summary.json").read_text())
        if (run_dir / "summary.json").exists()
        else {}
    )
    plots = plot_curves({run_dir.name: read_metrics(run_dir)}, run_dir / "plots")
    imgs = "".join(
        f'<img title="{html.escape(t)}" src="data:image/png;base64,{d}">' for t, d in plots
    )
    page = f"<html><head><meta charset=utf-8><title>{html.escape(run_dir.name)}</title>{_STYLE}</head><body>"
    page += f"<h1>Run {html.escape(run_dir.name)}</h1><h2>Before and after RL (same problems, same seed)</h2>{before_after(summary)}"
    page += f"<h2>Where the time goes</h2>{accounting_table(summary)}"
    page += f"<h2>Curves</h2>{imgs or '<p>no metrics</p>'}<h2>Sample trajectories</h2>{sample_trajectories(run_dir)}</body></html>"
    out = run_dir / "report.html"
    out.write_text(page)
    return out


def write_comparison(out_dir: str | Path, runs: dict[str, str | Path]) -> Path:
    """One page overlaying the curves of several runs, with each run's before/after table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    series = {name: read_metrics(Path(d)) for name, d in runs.items()}
    plots = plot_curves(series, out_dir / "plots")
    page = f"<html><head><meta charset=utf-8><title>comparison</title>{_STYLE}</head><body><h1>Comparison</h1>"
    rows = []
    for name, d in runs.items():
        p = Path(d) / "summary.json"
        s = json.loads(p.read_text()) if p.exists() else {}
        b, a = (
            (s.get("before") or {}).get("overall") or {},
            (s.get("after") or {}).get("overall") or {},
        )
        rows.append(
            [
                name,
                b.get("pass_rate", float("nan")),
                a.get("pass_rate", float("nan")),
                b.get("mean_reward", float("nan")),
                a.get("mean_reward", float("nan")),
                s.get("train_seconds", ""),
            ]
        )
    page += _table(
        rows, ["variant", "pass before", "pass after", "reward before", "reward after", "seconds"]
    )
    page += (
        "".join(f'<img title="{html.escape(t)}" src="data:image/png;base64,{d}">' for t, d in plots)
        + "</body></html>"
    )
    out = out_dir / "comparison.html"
    out.write_text(page)
    return out
