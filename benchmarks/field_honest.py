"""Benchmark: the honest field corpus through `serve-eval`, as a new user would judge it.

Starts `tritonforge serve-eval --device D --workers W`, sends every case of
tests/eval/corpus/field_honest (LLM-written Triton solutions of KernelBench problems, each recorded
correct by its source) under each preset (strict, kernelbench, tritonforge) to POST /v1/eval as
an inline problem (original size on a GPU, the CPU size on the CPU), `--concurrency` requests in
flight, and writes per case and preset: our status, rule and speedup next to the source's verdict
and speedup and the manifest's expectation. Every answer must be HTTP 200 with JSON a strict
parser accepts (no NaN); anything else counts in `http_errors`. Top level: `honest_total` (cases
whose source recorded them correct and that do not tamper with their harness), `honest_accepted`
(of those, accepted under the kernelbench preset), `real_bugs` (each honest case we reject under
kernelbench: the verdict's evidence, i.e. the input (trial, distribution, shapes) and output
(where, expected, got) that show the bug, or the error), `http_errors`. Resumable (bench_common
ResultFile): rows already in --out are kept, and with --budget-s no request starts after that
many seconds (a time-limited call continues on the next).

    python benchmarks/field_honest.py --device cuda --workers 4      # docs/bench/h200_field_honest.json
    python benchmarks/field_honest.py --device cpu --cases 3 --out runs/bench/cpu_field_honest.json

On the CPU (small mode) the cases run at CPU sizes on the Triton interpreter: a check that the
script works, not a figure (nothing is timed there); its default output is under runs/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import httpx  # noqa: E402
from bench_common import ResultFile, environment, serve_eval  # noqa: E402

import helpers.field_honest as fh  # noqa: E402

DEFAULT_OUT = {
    "cuda": "docs/bench/h200_field_honest.json",
    "cpu": "runs/bench/cpu_field_honest.json",
}


def strict_json(text: str) -> Any:
    """json.loads refusing NaN/Infinity (what a strict client does)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def choose(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cases of this call: all (GPU), or on the CPU the first --cases of the default tier."""
    cases = fh.cases()
    if args.device == "cpu":
        cases = [c for c in cases if c["cpu"] != "skip"]
        cases.sort(key=lambda c: c["cpu_tier"] != "default")
    if args.only:
        cases = [c for c in cases if any(k in c["file"] for k in args.only.split(","))]
    return cases[: args.cases] if args.cases else cases


def evidence(verdict: dict[str, Any]) -> dict[str, Any]:
    """The input and output that show why a verdict rejected the candidate."""
    m = verdict.get("mismatch") or {}
    return {
        "input": {k: m.get(k) for k in ("trial", "distribution", "expected_shape", "got_shape")},
        "output": {
            "index": m.get("worst_index"),
            "expected": m.get("worst_expected"),
            "got": m.get("worst_got"),
            "max_abs_diff": m.get("max_abs_diff"),
            "mismatched": m.get("mismatched"),
            "numel": m.get("numel"),
        },
        "message": (verdict.get("message") or "")[:600],
    }


async def judge(
    url: str, jobs: list[tuple[str, dict, dict]], concurrency: int, deadline: float, on_row
) -> None:
    """POST every job, `concurrency` in flight; none starts after `deadline` (monotonic)."""
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=7200) as http:

        async def one(key: str, case: dict[str, Any], body: dict[str, Any]) -> None:
            async with sem:
                t0 = time.monotonic()
                if t0 > deadline:  # left for the next call (the rows so far are kept)
                    return
                try:
                    r = await http.post(url + "/v1/eval", json=body)
                    verdict, code = strict_json(r.text), r.status_code
                except (httpx.HTTPError, ValueError) as exc:
                    verdict, code = {"status": "http_error", "message": str(exc)}, -1
                on_row(key, case, body["preset"], code, verdict, time.monotonic() - t0)

        await asyncio.gather(*(one(*job) for job in jobs))


def summarise(doc: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    """The top-level fields from the rows."""
    rows = doc["rows"]
    honest = {c["file"] for c in cases if c["honest"] and c["source_verdict"] == "correct"}
    kb = {r["case"]: r for r in rows if r["preset"] == "kernelbench"}
    doc["honest_total"] = len(honest)
    doc["honest_accepted"] = sum(kb.get(f, {}).get("status") == "correct" for f in honest)
    rejected = [f for f in sorted(honest) if f in kb and kb[f]["status"] != "correct"]
    doc["real_bugs"] = [
        {"case": f, "problem": kb[f]["problem"], "status": kb[f]["status"], "rule": kb[f]["rule"]}
        | kb[f]["evidence"]
        for f in rejected
    ]
    doc["http_errors"] = sum(r["http_status"] != 200 for r in rows)
    doc["judged"] = len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--workers", type=int, default=4, help="serve-eval --workers")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    ap.add_argument("--cases", type=int, default=None, help="only the first N cases")
    ap.add_argument("--only", default="", help="comma-separated substrings of case files")
    ap.add_argument("--presets", default=",".join(fh.PRESETS))
    ap.add_argument("--trials", type=int, default=None, help="correctness trials (preset's)")
    ap.add_argument("--budget-s", type=float, default=None, help="start no request after this")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    deadline = time.monotonic() + (args.budget_s or float("inf"))
    out = args.out or Path(DEFAULT_OUT[args.device])
    presets = [p for p in args.presets.split(",") if p]
    cases = choose(args)
    size = "original" if args.device == "cuda" else "cpu"
    problems = fh.problems(cases, size)
    header = {
        "benchmark": "field_honest",
        "device": args.device,
        "size": size,
        "command": " ".join(sys.argv),
        "environment": environment(args.device),
        "corpus": "tests/eval/corpus/field_honest",
    }
    result = ResultFile(out, header)
    done = result.done()

    def on_row(key: str, case: dict, preset: str, code: int, v: dict, wall: float) -> None:
        status, rule = fh.expected(case, preset, args.device)
        row = {"key": key, "case": case["file"], "problem": case["problem"], "preset": preset,
               "status": v.get("status"), "rule": v.get("rule"), "speedup": v.get("speedup"),
               "source_verdict": case["source_verdict"], "source_speedup": case["source_speedup"],
               "expected": status, "expected_rule": rule, "honest": case["honest"],
               "http_status": code, "wall_s": round(wall, 2),
               "evidence": None if v.get("status") == "correct" else evidence(v)}  # fmt: skip
        result.add(row, lambda doc: summarise(doc, cases))
        print(f"{key}: {row['status']} {row['rule'] or ''} (expected {status})", file=sys.stderr)

    jobs = []
    for case in cases:
        for preset in presets:
            key = f"{case['file']}|{preset}"
            if key in done or case["file"] not in problems:
                continue
            settings = {} if args.trials is None else {"correctness_trials": args.trials}
            body = {"problem": problems[case["file"]].model_dump(mode="json"),
                    "source": case["source"], "preset": preset, "settings": settings}  # fmt: skip
            jobs.append((key, case, body))
    with tempfile.TemporaryDirectory(prefix="tf-field-") as tmp:
        log_path = Path(tmp) / "server.log"
        with serve_eval(args.device, args.workers, log_path, ["cache_entries=0"]) as (url, up_s):
            result.doc["service_startup_s"] = round(up_s, 1)
            asyncio.run(judge(url, jobs, args.concurrency, deadline, on_row))
    result.save(lambda doc: summarise(doc, cases))
    summary = {k: result.doc[k] for k in ("honest_total", "honest_accepted", "http_errors")}
    print(json.dumps({**summary, "real_bugs": len(result.doc["real_bugs"]), "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
