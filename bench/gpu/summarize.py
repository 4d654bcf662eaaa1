"""Turns a device run's work folder (run.sh) into `summary.md`, the tables docs/gpu.md needs, and
`results.json`, the same figures for a tool (and the `--baseline` of a later summary).

Reads what is there and says what is missing: versions.json, phases.tsv, pairs.txt, pytest.junit.xml
(else the end of logs/pytest.log), check/<stem>.json, probe/<stem>_{bad,good}.json, ll302.json. Verdicts
of the probe runs are lintloop's own (`runtime_probe.verdicts.verdict`), where lintloop is importable.

    python3 bench/gpu/summarize.py --work WORK --out OUT [--baseline cpu_results.json]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

from fixture_pairs import FIXTURES, framework_of

MISSING = "—"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def size(n: float | None) -> str:
    """Bytes for a person: signed where it is a change."""
    if n is None:
        return MISSING
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def delta(n: float | None) -> str:
    return MISSING if n is None else ("+" if n > 0 else "") + size(n)


def _verdict_function() -> Callable[[str, list[dict], int | None, bool], dict[str, Any]] | None:
    try:
        from lintloop.runtime_probe.verdicts import Summary, verdict
    except Exception:
        return None
    return lambda code, events, rc, timed_out: verdict(code, Summary.from_events(events, rc, timed_out))


# --- the pieces ---------------------------------------------------------------------------------------

def phases(work: Path) -> list[dict[str, Any]]:
    rows = []
    for line in (work / "phases.tsv").read_text().splitlines() if (work / "phases.tsv").exists() else []:
        name, rc, seconds, limit = (line.split("\t") + [""] * 4)[:4]
        rows.append({"phase": name, "rc": rc, "seconds": seconds, "limit_s": limit})
    return rows


def pytest_results(work: Path) -> dict[str, Any]:
    junit = work / "pytest.junit.xml"
    if junit.exists():
        try:
            root = ET.parse(junit).getroot()
        except ET.ParseError as exc:
            return {"error": f"pytest.junit.xml unreadable: {exc}"}
        counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        failed, skip_reasons = [], {}
        for case in root.iter("testcase"):
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            counts[{"failure": "failed", "error": "errors"}.get(outcome, outcome)] += 1
            if outcome in ("failure", "error"):
                failed.append(case.get("name"))
            elif outcome == "skipped":
                reason = (case.find("skipped").get("message") or "").strip()
                skip_reasons[reason] = skip_reasons.get(reason, 0) + 1
        return {**counts, "total": sum(counts.values()), "failed_tests": failed, "skip_reasons": skip_reasons}
    log = work / "logs" / "pytest.log"
    last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "") if log.exists() else ""
    return {"error": "no pytest.junit.xml", "last_line": last}


def _main_pid(events: list[dict]) -> Any:
    return next((e.get("pid") for e in events if e.get("type") == "start" and e.get("root")),
                events[0].get("pid") if events else None)


def _median_per_call(samples: list[dict]) -> float | None:
    """Median of Δmem/Δn over consecutive samples of one series (`eval_forward`: n counts the calls)."""
    rates = [(b["mem"] - a["mem"]) / (b["n"] - a["n"]) for a, b in pairwise(samples) if b["n"] > a["n"]]
    return statistics.median(rates) if rates else None


def run_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The figures of one `lintloop probe --format json` output."""
    events = data.get("events") or []
    pid = _main_pid(events)
    steps = [e for e in events if e.get("type") == "step" and e.get("pid") == pid and e.get("mem") is not None]
    summary = data.get("summary") or {}
    device = next((e for e in events if e.get("type") == "device"), None)

    def of_type(kind: str) -> list[dict]:
        return [e for e in events if e.get("type") == kind]

    underflows = of_type("fp16_underflow")
    peaks = [e["peak"] for e in steps if e.get("peak") is not None]
    forwards = [e for e in of_type("eval_forward") if e.get("pid") == pid and e.get("mem") is not None]
    first_key = forwards[0].get("key") if forwards else None
    memory, host = summary.get("memory") or {}, summary.get("host_memory") or {}
    return {
        "returncode": data.get("returncode"), "timed_out": data.get("timed_out"),
        "duration_s": data.get("duration_s"), "steps": summary.get("steps"), "stop": summary.get("stop_reason"),
        "frameworks": sorted({f"{e.get('framework')} {e.get('version')}" for e in of_type("framework")}),
        "cuda_device": (device.get("name") if device.get("cuda_available") else "not available") if device else None,
        "mem_source": summary.get("mem_source"),
        "mem_first": steps[0]["mem"] if steps else None, "mem_last": steps[-1]["mem"] if steps else None,
        "mem_median_per_step": memory.get("median_increase_bytes_per_step"),
        "mem_grows": memory.get("grows"), "mem_total_growth": memory.get("total_growth_bytes"),
        "peak_max": max(peaks) if peaks else None, "peak_median": statistics.median(peaks) if peaks else None,
        "host_median_per_step": host.get("median_increase_bytes_per_step"), "host_grows": host.get("grows"),
        "eval_forwards": len(forwards),
        "eval_median_per_forward": _median_per_call([e for e in forwards if e.get("key") == first_key]),
        "fp16_underflow": {"backwards": len(underflows), "to_zero": sum(e.get("to_zero", 0) for e in underflows),
                           "subnormal": sum(e.get("subnormal", 0) for e in underflows),
                           "nonzero": sum(e.get("nonzero", 0) for e in underflows)} if underflows else None,
        "scaled_steps": len(of_type("scaled_step")), "scaled_clips": len(of_type("scaled_clip")),
        "compile_sites": [{k: e.get(k) for k in ("line", "function", "traces", "compiles", "new_functions",
                                                 "static_values")} for e in of_type("jax_compile_site")],
        "warnings": [f"{w.get('category')}: {str(w.get('message'))[:120]}" for w in summary.get("warnings") or []],
        "errors": [f"{e.get('exc_type')}: {str(e.get('message'))[:160]}" for e in summary.get("errors") or []],
        "none_gradients": len(summary.get("none_gradients") or []),
        "stderr_tail": (data.get("stderr_tail") or "")[-400:] if data.get("returncode") not in (0, None) else "",
    }


def headline(fig: dict[str, Any], probe_column: str, evidence: dict[str, Any]) -> str:
    """The figures of a run that bear on its rule, in one cell."""
    parts = []
    # The verdict's own memory series first (LL703's is per evaluation forward, not per optimizer step).
    if (evidence.get("memory") or {}).get("median_increase_bytes_per_step") is not None:
        parts.append(f"{evidence.get('mem_source') or fig['mem_source']} "
                     f"{delta(evidence['memory']['median_increase_bytes_per_step'])}/step")
    elif "mem" in probe_column and fig.get("mem_median_per_step") is not None:
        parts.append(f"{fig['mem_source']} {delta(fig['mem_median_per_step'])}/step")
    if "mem" in probe_column and fig.get("host_median_per_step") is not None:
        parts.append(f"host {delta(fig['host_median_per_step'])}/step")
    if fig.get("peak_max") is not None:
        parts.append(f"peak {size(fig['peak_max'])}")
    if fig.get("fp16_underflow"):
        u = fig["fp16_underflow"]
        parts.append(f"fp16: {u['to_zero']} grads to 0, {u['subnormal']} subnormal of {u['nonzero']} "
                     f"({u['backwards']} backwards)")
    if fig.get("scaled_steps"):
        parts.append(f"{fig['scaled_steps']} steps on scaled grads")
    if fig.get("scaled_clips"):
        parts.append(f"{fig['scaled_clips']} clips of scaled grads")
    for site in fig.get("compile_sites") or []:
        parts.append(f"L{site['line']} {site['function']}: {site['compiles']} compiles, {site['traces']} traces")
    if fig.get("none_gradients"):
        parts.append(f"{fig['none_gradients']} None-gradient reports")
    if fig.get("warnings"):
        parts.append(f"{len(fig['warnings'])} warnings")
    parts += fig.get("errors") or []
    return "; ".join(parts) or MISSING


def check_verdicts(findings: Any, path: str, code: str) -> dict[str, Any]:
    """What `check --probe` said of `path`'s findings of rule `code`."""
    if not isinstance(findings, list):
        return {"status": "missing"}
    own = [f for f in findings if f.get("path", "").endswith(path) and f.get("code") == code]
    if not own:
        return {"status": "no finding"}
    probes = [f.get("probe") or {} for f in own]
    evidence = probes[0].get("evidence") or {}
    return {"status": "/".join(sorted({p.get("status", "no verdict") for p in probes})), "findings": len(own),
            "signal": evidence.get("signal") or evidence.get("reason") or evidence.get("looked_for"),
            "fixed_program": evidence.get("fixed_program"), "report": evidence.get("report")}


def fixture_rows(work: Path) -> list[dict[str, Any]]:
    decide = _verdict_function()
    rows = []
    pairs = (work / "pairs.txt").read_text().split("\n") if (work / "pairs.txt").exists() else []
    for line in filter(None, pairs):
        stem, framework, probe_column = (line.split(" ", 2) + ["", ""])[:3]
        code = stem[:5]
        findings = read_json(work / "check" / f"{stem}.json")
        row: dict[str, Any] = {"stem": stem, "code": code, "framework": framework, "probe_column": probe_column}
        for kind in ("bad", "good"):
            data = read_json(work / "probe" / f"{stem}_{kind}.json")
            run: dict[str, Any] = {"check": check_verdicts(findings, f"{stem}_{kind}.py", code)}
            if data is None:
                run["probe"] = {"status": "missing"}
            else:
                run["figures"] = run_figures(data)
                run["probe"] = {"status": "lintloop not importable"} if decide is None else \
                    decide(code, data.get("events") or [], data.get("returncode"), bool(data.get("timed_out")))
                run["headline"] = headline(run["figures"], probe_column, run["probe"].get("evidence") or {})
            row[kind] = run
        rows.append(row)
    return rows


def not_run() -> dict[str, Any]:
    """The fixture pairs of the frameworks the device lacks (TensorFlow, Keras) with a probe column (where
    the catalog is importable to say)."""
    stems = sorted(p.name[: -len("_bad.py")] for p in FIXTURES.glob("LL*_bad.py")
                   if (FIXTURES / p.name.replace("_bad.py", "_good.py")).exists() and framework_of(p) is None)
    try:
        from lintloop.rules import lookup
    except Exception:
        return {"pairs": stems, "probe_column_checked": False}
    return {"pairs": [s for s in stems if (rule := lookup(s[:5])) is not None and rule.probe != "—"],
            "probe_column_checked": True}


# --- the page -----------------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    return MISSING if value in (None, "") else str(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows), ""]


def verdict_cell(run: dict[str, Any] | None, source: str) -> str:
    if not run:
        return MISSING
    found = run.get(source) or {}
    status = found.get("status", MISSING)
    detail = (found.get("evidence") or {}).get("signal") if source == "probe" else found.get("signal")
    if found.get("fixed_program"):  # check ran the fixed copy too
        detail = f"{detail}; fixed copy: {found['fixed_program']}"
    return f"{status} ({detail})" if detail and status == "confirmed" else status


def versions_section(versions: dict[str, Any] | None) -> list[str]:
    if not versions:
        return ["_versions.json missing_", ""]
    smi, torch, jax, ll = (versions.get(k) or {} for k in ("nvidia_smi", "torch", "jax", "lintloop"))
    gpu = (smi.get("gpus") or [{}])[0]
    gpu_text = (f"{gpu.get('name', MISSING)}, {gpu.get('memory.total', MISSING)}, "
                f"compute {gpu.get('compute_cap', MISSING)}") if gpu else smi.get("error", MISSING)
    torch_text = (f"{torch.get('version')}, CUDA {torch.get('cuda')}, cuDNN {torch.get('cudnn')}, "
                  f"cuda_available={torch.get('cuda_available')}, {torch.get('device', '')}"
                  ) if "version" in torch else torch.get("error", MISSING)
    jax_text = (f"{jax.get('version')} (jaxlib {jax.get('jaxlib')}), backend {jax.get('backend')}, "
                f"devices {', '.join(jax.get('devices') or [])}; preallocation {jax.get('preallocate')}"
                ) if "version" in jax else jax.get("error", MISSING)
    lintloop_text = (f"{ll.get('version', ll.get('error'))} from {ll.get('imported_from')} "
                     f"(mode {ll.get('mode')}; {', '.join(ll.get('fingerprints') or [])})")
    rows = [
        ["GPU", gpu_text],
        ["driver", f"{gpu.get('driver_version', MISSING)} (CUDA {smi.get('driver_cuda') or MISSING})"],
        ["Python", f"{versions.get('python')} ({versions.get('executable')}), {versions.get('cpus')} CPUs"],
        ["torch", torch_text],
        ["JAX", jax_text],
        ["TensorFlow", versions.get("tensorflow")],
        ["lintloop", lintloop_text],
        ["unmet requirements", "; ".join(versions.get("unmet_requirements") or []) or "none"],
    ]
    return table(["", ""], rows)


def pytest_section(result: dict[str, Any]) -> list[str]:
    if "error" in result:
        return [f"_{result['error']}_ {result.get('last_line', '')}", ""]
    lines = [(f"{result['passed']} passed, {result['failed']} failed, {result['errors']} errors, "
              f"{result['skipped']} skipped of {result['total']} (`-m gpu`; the issue asks for ≥ 39 passed)."), ""]
    lines += [f"- failed: `{name}`" for name in result["failed_tests"]]
    lines += [f"- skipped ×{n}: {reason}" for reason, n in result["skip_reasons"].items()]
    return lines + [""]


def rules_section(rows: list[dict[str, Any]], baseline: dict[str, dict[str, Any]]) -> list[str]:
    header = ["fixture", "fw", "probe", "check bad", "check good", "probe bad", "probe good", "bad: figures",
              "good: figures"]
    if baseline:
        header += ["baseline probe bad / good", "baseline bad: figures"]
    body = []
    for row in rows:
        bad, good = row.get("bad"), row.get("good")
        line = [row["stem"], row["framework"], row["probe_column"], verdict_cell(bad, "check"),
                verdict_cell(good, "check"), verdict_cell(bad, "probe"), verdict_cell(good, "probe"),
                (bad or {}).get("headline"), (good or {}).get("headline")]
        if baseline:
            base = baseline.get(row["stem"], {})
            line += [f"{verdict_cell(base.get('bad'), 'probe')} / {verdict_cell(base.get('good'), 'probe')}",
                     (base.get("bad") or {}).get("headline")]
        body.append(line)
    return table(header, body)


def evidence_section(rows: list[dict[str, Any]]) -> list[str]:
    """lintloop's own account of what it saw on each bad fixture (the `text` of the verdict's evidence)."""
    lines = []
    for row in rows:
        probe = (row.get("bad") or {}).get("probe") or {}
        evidence = probe.get("evidence") or {}
        said = evidence.get("text") or evidence.get("error") or (
            f"{evidence['signal']}: {row['bad'].get('headline')}" if evidence.get("signal") else
            evidence.get("reason") or evidence.get("looked_for"))
        lines.append(f"- {row['stem']}_bad: {probe.get('status', MISSING)}: {str(said or MISSING)[:400]}")
    return lines + [""]


def memory_section(rows: list[dict[str, Any]], baseline: dict[str, dict[str, Any]]) -> list[str]:
    header = ["run", "source", "steps", "allocated first → last", "median Δ/optimizer step",
              "peak (max / median)", "host Δ/step", "median Δ/eval forward", "verdict's series: median Δ"]
    if baseline:
        header += ["baseline source", "baseline verdict's series"]
    body = []
    for row in rows:
        if row["framework"] != "torch" or "mem" not in row["probe_column"]:
            continue
        for kind in ("bad", "good"):
            run = row.get(kind) or {}
            fig = run.get("figures")
            if not fig:
                continue
            line = [f"{row['stem']}_{kind}", fig["mem_source"], fig["steps"],
                    f"{size(fig['mem_first'])} → {size(fig['mem_last'])}", delta(fig["mem_median_per_step"]),
                    f"{size(fig['peak_max'])} / {size(fig['peak_median'])}", delta(fig["host_median_per_step"]),
                    delta(fig["eval_median_per_forward"]), _verdict_memory(run)]
            if baseline:
                base = baseline.get(row["stem"], {}).get(kind) or {}
                line += [(base.get("figures") or {}).get("mem_source"), _verdict_memory(base)]
            body.append(line)
    return table(header, body)


def _verdict_memory(run: dict[str, Any]) -> str:
    """The memory series a verdict judged (LL703: per evaluation forward), where it names one."""
    evidence = (run.get("probe") or {}).get("evidence") or {}
    memory = evidence.get("memory") or {}
    if memory.get("median_increase_bytes_per_step") is None:
        return MISSING
    return f"{evidence.get('mem_source') or 'forward'} {delta(memory['median_increase_bytes_per_step'])}"


def _share(run: dict[str, Any], method: str, key: str) -> Any:
    return (run.get(method) or {}).get(key)


def ll302_section(timing: dict[str, Any] | None) -> list[str]:
    if not timing:
        return ["_ll302.json missing_", ""]
    lines = [(f"Device: {timing.get('device')}; torch {timing.get('torch')} (CUDA {timing.get('cuda')}), "
              f"float32 matmul precision {timing.get('float32_matmul_precision')}; convert every "
              f"{timing.get('every')} steps; {timing.get('warmup_steps')} warm-up steps; "
              f"seed {timing.get('seed')}; CPU threads: {timing.get('cpu_threads')}."), ""]
    if timing.get("note"):
        lines += [f"**{timing['note']}**", ""]
    every = f"detach_every_{timing.get('every')}"
    body = []
    for entry in timing.get("shapes") or []:
        shape, per_step, batched = entry.get("shape", {}), entry.get("item_every_step", {}), entry.get(every, {})
        model = (f"{shape.get('name')} ({shape.get('inputs')}→{shape.get('width')}×{shape.get('hidden_layers')}"
                 f"→{shape.get('classes')}, batch {shape.get('batch')})")
        body.append([model, entry.get("steps_per_run"),
                     per_step.get("steps_per_s"), batched.get("steps_per_s"), entry.get("speedup"),
                     _share(per_step, "profiler", "idle_share"), _share(batched, "profiler", "idle_share"),
                     _share(per_step, "events", "gap_share"), _share(batched, "events", "gap_share")])
    lines += table(["model", "steps/run", "steps/s .item() every step", f"steps/s every {timing.get('every')}",
                    "speedup", "GPU idle .item()", f"GPU idle every {timing.get('every')}", "gap .item()",
                    f"gap every {timing.get('every')}"], body)
    return lines + ["How:", "", str(timing.get("method", MISSING)), ""]


def digest(results: dict[str, Any]) -> list[str]:
    """A few lines for the console: the device reply keeps only the last 12,000 characters of output."""
    versions = results["versions"] or {}
    smi, torch, jax = (versions.get(k) or {} for k in ("nvidia_smi", "torch", "jax"))
    gpu = (smi.get("gpus") or [{}])[0]
    device = (f"device: {gpu.get('name', 'no GPU')}, driver {gpu.get('driver_version')} "
              f"(CUDA {smi.get('driver_cuda')}); torch {torch.get('version')} CUDA {torch.get('cuda')} "
              f"available={torch.get('cuda_available')}; jax {jax.get('version')} backend {jax.get('backend')}; "
              f"lintloop {(versions.get('lintloop') or {}).get('mode')}")
    lines = [device, "phases: " + "; ".join(f"{p['phase']} rc={p['rc']} {p['seconds']}s" for p in results["phases"])]
    pytest = results["pytest"]
    lines.append("pytest -m gpu: " + (pytest.get("error", "") if "error" in pytest else
                                      f"{pytest['passed']} passed, {pytest['failed']} failed, {pytest['errors']} "
                                      f"errors, {pytest['skipped']} skipped of {pytest['total']}"))
    for row in results["fixtures"]:
        bad, good = row.get("bad") or {}, row.get("good") or {}
        lines.append(f"{row['stem']}: check {verdict_cell(bad, 'check')} / good {verdict_cell(good, 'check')}; "
                     f"probe {verdict_cell(bad, 'probe')} / good {verdict_cell(good, 'probe')} | "
                     f"{bad.get('headline', MISSING)}")
    timing = results["ll302"] or {}
    every = f"detach_every_{timing.get('every')}"
    for entry in timing.get("shapes") or []:
        per_step, batched = entry.get("item_every_step", {}), entry.get(every, {})
        lines.append(f"LL302 {entry['shape']['name']} on {timing.get('device')}: {per_step.get('steps_per_s')} vs "
                     f"{batched.get('steps_per_s')} steps/s (x{entry.get('speedup')}), GPU idle "
                     f"{_share(per_step, 'profiler', 'idle_share')} vs {_share(batched, 'profiler', 'idle_share')}, "
                     f"gap {_share(per_step, 'events', 'gap_share')} vs {_share(batched, 'events', 'gap_share')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="run.sh's work folder")
    parser.add_argument("--out", type=Path, required=True, help="where summary.md and results.json go")
    parser.add_argument("--baseline", type=Path, help="results.json of another run (the CPU's) to set beside")
    args = parser.parse_args(argv)

    results = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": read_json(args.work / "versions.json"), "phases": phases(args.work),
        "pytest": pytest_results(args.work), "fixtures": fixture_rows(args.work),
        "ll302": read_json(args.work / "ll302.json"), "not_run": not_run(),
    }
    base = read_json(args.baseline) if args.baseline else None
    baseline = {row["stem"]: row for row in (base or {}).get("fixtures", [])}
    base_torch = ((base or {}).get("versions") or {}).get("torch") or {}
    base_device = f"{base_torch.get('device') or 'CPU'}, torch {base_torch.get('version', MISSING)}"

    smi = ((results["versions"] or {}).get("nvidia_smi") or {}).get("gpus") or [{}]
    lines = [f"# lintloop on the device: {smi[0].get('name', 'no GPU')}", "",
             f"Generated {results['generated']} by bench/gpu/summarize.py from run.sh's work folder.", ""]
    if base is not None:
        lines += [f"Baseline beside it: {args.baseline} ({base_device}, generated {base.get('generated')}).", ""]
    lines += ["## Versions", "", *versions_section(results["versions"])]
    lines += ["## Phases", "", *table(["phase", "rc", "seconds", "limit (s)"],
                                       [list(p.values()) for p in results["phases"]])]
    lines += ["## pytest -m gpu (tests/test_probe_gpu.py)", "", *pytest_section(results["pytest"])]
    lines += ["## Verdicts per fixture (`check --probe --device cuda` and `probe --device cuda`)", "",
              ("check: the verdict `check --probe` attached to the file's findings of the rule (a good fixture "
               "should have none); probe: lintloop's verdict on `lintloop probe` of the file alone."), "",
              *rules_section(results["fixtures"], baseline)]
    lines += ["## What the probe saw on each bad fixture", "", *evidence_section(results["fixtures"])]
    lines += ["## Memory per step (PyTorch memory rules)", "",
              ("On CUDA: `torch.cuda.memory_allocated` at each sampled step, the allocator's peak since the "
               "previous sample, and the host heap beside it; on CPU the heap (mallinfo2) alone. The rules with "
               "`mem` in their probe column."), "",
              *memory_section(results["fixtures"], baseline)]
    lines += ["## LL302: `.item()` every step against every N steps", "", *ll302_section(results["ll302"])]
    skipped = results["not_run"]
    lines += ["## Not run on the device", "",
              ("TensorFlow/Keras: not installed there (its GPU wheels are far over the 64 MiB a call carries): "
               f"{len(skipped['pairs'])} fixture pairs"
               f"{' with a probe column' if skipped['probe_column_checked'] else ''}: {', '.join(skipped['pairs'])}."),
              ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "summary.md").write_text(re.sub(r"\n{3,}", "\n\n", "\n".join(lines)))
    print("\n".join(digest(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
