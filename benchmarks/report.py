"""The benchmark results as markdown tables, and the verdicts drawn from them.

Both read only the results dict that `results.json` holds, so a table can be re-rendered
from an old run:

    results = json.load(open("workspace/bench/results.json"))
    print(render_markdown(results))
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.plan import REFERENCE_PRECISION, SEED_MODEL
from benchmarks.rates import epoch_rates

MFU_TARGET = 0.60
TFLITE_SIZE_LIMITS = {"fp16": 0.52, "int8": 0.30}
# Ratios measured on a machine shared with other work wobble by a few percent; within this
# band the Trainer counts as "as fast as" plain fit.
OVERHEAD_TOLERANCE = 0.05


def _xla(on: bool) -> str:
    return "on" if on else "off"


def _shape(shape: list[int]) -> str:
    return "×".join(str(d) for d in shape)


def _number(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _short(text: str | None, limit: int = 120) -> str:
    text = (text or "").replace("|", "/").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ok_cells(results: dict[str, Any], model: str) -> list[dict[str, Any]]:
    return [
        row for row in results.get("throughput", [])
        if row["model"] == model and row["status"] == "ok"
    ]


def verdicts(results: dict[str, Any]) -> list[str]:
    """Plain-sentence findings: fastest cell vs `auto`, MFU target, ratios, TF Lite sizes."""
    lines: list[str] = []
    auto = (results.get("host") or {}).get("auto") or {}
    models = list(dict.fromkeys(row["model"] for row in results.get("throughput", [])))
    for model in models:
        cells = _ok_cells(results, model)
        if not cells:
            continue
        fastest = max(cells, key=lambda row: row["samples_per_sec"])
        line = (f"{model}: fastest cell is {fastest['precision']} with XLA "
                f"{_xla(fastest['xla'])} ({fastest['samples_per_sec']:,.1f} {fastest['unit']}/s")
        if fastest.get("speedup") is not None:
            line += f", {fastest['speedup']:.2f}× float32 without XLA"
        line += ")."
        auto_cell = next((row for row in cells if row["precision"] == auto.get("precision")
                          and row["xla"] == auto.get("xla")), None)
        if auto:
            line += (f" `auto` chooses {auto['precision']} with XLA {_xla(auto['xla'])} "
                     f"({auto['precision_reason']}; {auto['xla_reason']})")
            if auto_cell is fastest:
                line += ": the fastest cell."
            elif auto_cell:
                ratio = auto_cell["samples_per_sec"] / fastest["samples_per_sec"]
                line += f", which runs at {ratio:.2f}× the fastest cell."
            else:
                line += "."
        lines.append(line)
    seed = next((row for row in _ok_cells(results, SEED_MODEL)
                 if row["precision"] == REFERENCE_PRECISION and not row["xla"]), None)
    if seed:
        holds = "holds" if seed["mfu"] >= MFU_TARGET else "does NOT hold"
        lines.append(
            f"MFU target ({MFU_TARGET:.0%} of the matmul ceiling) {holds} for {SEED_MODEL} "
            f"float32 {_shape(seed['input_shape'])} batch {seed['batch_size']}: "
            f"{seed['achieved_gflops']:.1f} GFLOP/s of {seed['ceiling_gflops']:.1f} = "
            f"{seed['mfu']:.0%}."
        )
    overhead = results.get("overhead") or {}
    if overhead.get("status") == "ok":
        ratio = overhead["ratio"]
        if ratio >= 1.0:
            verdict = "as fast as plain fit or faster"
        elif ratio >= 1.0 - OVERHEAD_TOLERANCE:
            verdict = f"within the {OVERHEAD_TOLERANCE:.0%} tolerance of plain fit"
        else:
            verdict = "SLOWER than plain fit"
        dataset_ratio = overhead["dataset_ratio"]
        line = (f"Trainer overhead: Trainer/plain fit = {ratio:.2f} ({verdict}); plain fit fed "
                f"by the Trainer's own tf.data pipeline runs at {dataset_ratio:.2f}, and the "
                f"Trainer runs at {ratio / dataset_ratio:.2f} of that")
        spread = _overhead_spread(overhead)
        if spread is not None:
            line += (f"; single epochs of one variant range over ±{spread:.0%} of its median "
                     "here, so smaller differences are noise")
        if ratio < 1.0 - OVERHEAD_TOLERANCE:
            line += ("; what the Trainer adds: its instrumented train step (gradient norm, "
                     "per-step loss for the divergence guard) and its callbacks")
        lines.append(line + ".")
    on_cpu = (results.get("host") or {}).get("device", "CPU") == "CPU"
    for row in (results.get("input_pipeline") or {}).get("rows", []):
        bound = "input-bound" if row["ratio"] < 1.0 else "keeps up when it has the cores to itself"
        line = (f"Input pipeline at {_shape(row['input_size'])}: decoding every epoch it "
                f"delivers {row['ratio']:.2f}× what the model consumes ({bound}); from the "
                f"in-memory cache of decoded images {row['cached_ratio']:.1f}×")
        if on_cpu:
            line += ("; on a CPU decoding shares the cores that train, which is why the "
                     "Trainer caches decoded images that fit in `trainer.cache_max_mb`")
        lines.append(line + ".")
    rows = (results.get("publication") or {}).get("rows", [])
    for variant, limit in TFLITE_SIZE_LIMITS.items():
        row = next((r for r in rows if r.get("variant") == variant), None)
        if row and row.get("size_vs_tflite_fp32") is not None:
            holds = "≤" if row["size_vs_tflite_fp32"] <= limit else "> (misses)"
            lines.append(f"TF Lite {variant}: {row['size_vs_tflite_fp32']:.3f}× the fp32 size "
                         f"{holds} {limit}×.")
    return lines


def _header(results: dict[str, Any]) -> list[str]:
    host = results.get("host") or {}
    cpu = host.get("cpu") or {}
    lines = [
        "## mptfx bench results",
        "",
        f"Command: `{results.get('command')}` · started {results.get('started')} · "
        f"{results.get('seconds', 0):.0f} s · load average (1 min) "
        f"{_number((results.get('load_average_start') or [None])[0], 2)} at start, "
        f"{_number((results.get('load_average_end') or [None])[0], 2)} at end",
        "",
    ]
    if host:
        devices = ", ".join(
            d["name"] + (f" (cc {d['compute_capability'][0]}.{d['compute_capability'][1]})"
                         if d.get("compute_capability") else "")
            for d in host.get("devices", [])
        )
        ceilings = "; ".join(
            f"{dtype} {c['gflops']:.0f} GFLOP/s at {c['size']}²"
            for dtype, c in host.get("ceilings", {}).items()
        )
        lines += [
            f"Host: {cpu.get('model_name')}, {cpu.get('logical_cpus')} logical CPUs, flags "
            f"{', '.join(cpu.get('flags', [])) or 'none of interest'}; devices: {devices}; "
            f"TensorFlow {host.get('tensorflow')}, Keras {host.get('keras')}.",
            "",
            f"Matmul ceiling (best median over square sizes): {ceilings}.",
            "",
            f"`auto` on this machine: precision {host['auto']['precision']} "
            f"({host['auto']['precision_reason']}), XLA {_xla(host['auto']['xla'])} "
            f"({host['auto']['xla_reason']}).",
            "",
        ]
    return lines


def _throughput_table(results: dict[str, Any]) -> list[str]:
    rows = results.get("throughput") or []
    if not rows:
        return []
    lines = [
        "### Training throughput (synthetic data on the device)",
        "",
        "Median of timed windows after warm-up; speedup over float32 without XLA of the same "
        "model in this run; MFU = counted training FLOP/s ÷ matmul ceiling of the compute "
        "dtype, measured between the windows (benchmarks/flops.py has the formula).",
        "",
        "| model | input | batch | precision | XLA | samples/s | step ms | speedup "
        "| peak memory MB | GFLOP/s | MFU | load |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        head = (f"| {row['model']} | {_shape(row['input_shape'])} | {row['batch_size']} | "
                f"{row['precision']} | {_xla(row['xla'])} |")
        if row["status"] != "ok":
            lines.append(f"{head} {row['status']}: {_short(row['error'])} | | | | | | | |")
            continue
        lines.append(
            f"{head} {_number(row['samples_per_sec'], 1)} {row['unit']}/s | "
            f"{_number(row['step_ms'], 1)} | {_number(row.get('speedup'), 2)}× | "
            f"{_number(row['peak_memory_mb'])} ({row['memory_kind']}; "
            f"+{_number(row.get('training_memory_mb'))} training) | "
            f"{_number(row['achieved_gflops'], 1)} | {row['mfu']:.0%} "
            f"(of {row['ceiling_gflops']:.0f}) | {_number(row.get('load_average_1m'), 1)} |"
        )
    return lines + [""]


def _time_breakdown(results: dict[str, Any]) -> list[str]:
    """For cells measured with a profile: kernel efficiency, then the profiler's top ops."""
    lines: list[str] = []
    for row in results.get("throughput") or []:
        if row["status"] != "ok" or not (row.get("profile") or row.get("kernels")):
            continue
        title = f"{row['model']} {row['precision']} XLA {_xla(row['xla'])}"
        kernels = row.get("kernels") or []
        if kernels:
            lines += [
                f"### Why MFU is what it is: {title}, each counted pass timed alone",
                "",
                "| layer | pass | GFLOP/step | ms | GFLOP/s | of the matmul ceiling |",
                "|---|---|---:|---:|---:|---:|",
            ]
            for kernel in kernels:
                lines.append(
                    f"| {kernel['layer']} | {kernel['pass']} | {kernel['gflop']:.3f} | "
                    f"{kernel['ms']:.2f} | {kernel['gflops']:.0f} | {kernel['of_ceiling']:.0%} |"
                )
            kernel_ms = sum(kernel["ms"] for kernel in kernels)
            counted_gflop = sum(kernel["gflop"] for kernel in kernels)
            ceiling = row["ceiling_gflops"]
            text = (f"The counted passes take {kernel_ms:.1f} ms when run alone "
                    f"({counted_gflop / kernel_ms * 1000 / ceiling:.0%} of the ceiling on "
                    f"average), {kernel_ms / row['step_ms']:.0%} of the measured "
                    f"{row['step_ms']:.1f} ms step")
            optimizer_ms = row.get("optimizer_update_ms")
            if optimizer_ms is not None:
                text += (f"; the optimizer update alone takes {optimizer_ms:.1f} ms "
                         f"({optimizer_ms / row['step_ms']:.0%})")
            text += (". The rest of the step is work MFU does not count: pooling, "
                     "activations, bias and their gradients, loss, metrics, framework.")
            lines += ["", text, ""]
        if row.get("profile"):
            lines += [
                f"Top ops of {title} (TensorFlow profiler; ops overlap on the inter-op "
                "threads, so shares are of the summed op time):",
                "",
                "| layer | op | kernel | ms/step | share of op time |",
                "|---|---|---|---:|---:|",
            ]
            for op in row["profile"]:
                lines.append(f"| {op['layer'] or '(optimizer, loss, metrics)'} | {op['op']} | "
                             f"{op['kernel']} | {op['ms_per_step']:.2f} | {op['share']:.0%} |")
            lines.append("")
    return lines


def _largest_batch_table(results: dict[str, Any]) -> list[str]:
    section = results.get("largest_batch") or {}
    if not section.get("rows"):
        return []
    cap = section.get("memory_cap_mb")
    limit = f"peak RSS ≤ {cap:.0f} MB (`--memory-cap`)" if cap else "GPU memory"
    lines = [
        f"### Largest batch ({limit}; doubling, then bisection)",
        "",
        "| model | input | precision | largest batch | first failure | peak MB at largest "
        "| probes |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        if row.get("skipped"):
            lines.append(f"| {row['model']} | | {row['precision']} | skipped: "
                         f"{row['skipped']} | | | |")
            continue
        largest = str(row["largest"]) + (" (max tried)" if row.get("capped") else "")
        if row.get("unknown_at"):
            largest += f" (probe at {row['unknown_at']} did not finish)"
        lines.append(
            f"| {row['model']} | {_shape(row['input_shape'])} | {row['precision']} | {largest} | "
            f"{row['first_failure'] or '–'} | {_number(row.get('peak_memory_mb_at_largest'))} | "
            f"{len(row['probes'])} |"
        )
    return lines + [""]


def _input_tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    section = results.get("input_pipeline") or {}
    if section.get("rows"):
        lines += [
            "### Input pipeline (Trainer's tf.data from the ingested digits TFRecords)",
            "",
            "Delivered: the Trainer's `make_dataset` iterated alone, decoding every epoch "
            "(`trainer.cache_max_mb=0`, or data larger than the cache) and from its in-memory "
            "cache of decoded images (the default when they fit); consumed: the model "
            "training on synthetic data alone, at the same size, batch and precision.",
            "",
            "| model | input | batch | precision | delivered img/s, decoding | "
            "delivered img/s, cached | model consumes img/s | decoding ÷ consumed | "
            "cached ÷ consumed |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for row in section["rows"]:
            lines.append(
                f"| {row['model']} | {_shape(row['input_size'])} | {row['batch_size']} | "
                f"{row['precision']} | {_number(row['delivered_images_per_sec'])} | "
                f"{_number(row['delivered_cached_images_per_sec'])} | "
                f"{_number(row['consumed_images_per_sec'])} | {row['ratio']:.2f} | "
                f"{row['cached_ratio']:.1f} |"
            )
        lines.append("")
    elif section.get("status"):
        lines += [f"Input pipeline: {section['status']}: {section.get('error')}", ""]
    ingest = results.get("ingest") or {}
    if ingest.get("status") == "ok":
        lines += [
            f"### Ingest vs TFX ImportExampleGen ({ingest['records']:,} records in "
            f"{ingest['files']} TFRecord files)",
            "",
            "| component | seconds | records/s | written |",
            "|---|---:|---:|---:|",
            f"| mptfx ingest (decode + check + re-encode every image) | "
            f"{ingest['ours_seconds']:.1f} | {ingest['ours_records_per_sec']:,.0f} | "
            f"{ingest['ours_written']:,} ({ingest['ours_quarantined']} quarantined) |",
            f"| ImportExampleGen (copies records, no decoding) | "
            f"{ingest['import_example_gen_seconds']:.1f} | "
            f"{ingest['import_example_gen_records_per_sec']:,.0f} | "
            f"{ingest['import_example_gen_written']:,} |",
            "",
        ]
    elif ingest.get("status"):
        lines += [f"Ingest comparison: {ingest['status']}: {ingest.get('error')}", ""]
    return lines


def _overhead_spread(section: dict[str, Any]) -> float | None:
    """The largest half-range of one variant's epoch rates, relative to its median."""
    spreads = []
    for key in ("plain_runs", "dataset_runs", "trainer_runs"):
        rates = epoch_rates(section.get(key))
        if len(rates) >= 2:
            spreads.append((max(rates) - min(rates)) / 2 / statistics.median(rates))
    return max(spreads) if spreads else None


def _range(section: dict[str, Any], key: str) -> str:
    rates = epoch_rates(section.get(key))
    return f"{min(rates):,.0f}–{max(rates):,.0f}" if rates else ""


def _overhead_table(results: dict[str, Any]) -> list[str]:
    section = results.get("overhead") or {}
    if section.get("status") != "ok":
        return [f"Trainer overhead: {section['status']}: {section.get('error')}", ""] \
            if section.get("status") else []
    plain = section["plain_fit_images_per_sec"]
    lines = [
        f"### Trainer overhead ({section['model']} {_shape(section['input_size'])}, batch "
        f"{section['batch_size']}, {section['precision']}, XLA {_xla(section['xla'])}, "
        f"{section['epochs']} epochs of {section['train_examples']:,} images with "
        f"validation, {section['rounds']} rounds; median epoch after each run's first)",
        "",
        "| variant | train img/s (median) | single epochs | ÷ plain fit |",
        "|---|---:|---:|---:|",
        f"| plain `model.fit(x, y)`, images decoded once into memory | {plain:,.0f} | "
        f"{_range(section, 'plain_runs')} | 1.00 |",
        f"| plain `model.fit` on the Trainer's tf.data pipeline (`make_dataset`, its defaults) | "
        f"{section['plain_fit_on_trainer_dataset_images_per_sec']:,.0f} | "
        f"{_range(section, 'dataset_runs')} | {section['dataset_ratio']:.2f} |",
        f"| mptfx Trainer `run_fn` | {section['trainer_images_per_sec']:,.0f} | "
        f"{_range(section, 'trainer_runs')} | {section['ratio']:.2f} |",
    ]
    return lines + [""]


def _publication_table(results: dict[str, Any]) -> list[str]:
    section = results.get("publication") or {}
    if not section.get("rows"):
        return [f"Publication: {section['status']}: {section.get('error')}", ""] \
            if section.get("status") else []
    first = section["rows"][0]
    lines = [
        f"### Publication ({_shape(first['input_size'])} input, {first['eval_images']} eval "
        "images, CPU)",
        "",
        "| format | size KiB | × TF Lite fp32 | latency p50 ms | latency p99 ms "
        "| throughput img/s | threads | accuracy | agreement |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in section["rows"]:
        batch = "" if row["throughput_batch"] == 1 else f" (batch {row['throughput_batch']})"
        lines.append(
            f"| {row['format']} | {row['bytes'] / 1024:,.1f} | "
            f"{_number(row.get('size_vs_tflite_fp32'), 3)} | {row['latency_ms_p50']:.3f} | "
            f"{row['latency_ms_p99']:.3f} | {row['throughput_images_per_sec']:,.0f}{batch} | "
            f"{row['threads']} | {row['accuracy']:.3f} | {row['agreement_with_savedmodel']:.3f} |"
        )
    return lines + [""]


def _pipeline_table(results: dict[str, Any]) -> list[str]:
    section = results.get("pipeline") or {}
    if not section.get("components"):
        return [f"Pipeline: {section['status']}: {section.get('error')}", ""] \
            if section.get("status") else []
    lines = [
        f"### Pipeline (`{section['command']}`: {section['status']}, "
        f"{_number(section.get('wall_seconds'), 1)} s wall)",
        "",
        "| component | status | seconds |",
        "|---|---|---:|",
    ]
    for name, component in section["components"].items():
        lines.append(f"| {name} | {component['status']} | {_number(component['seconds'], 1)} |")
    return lines + [""]


def _auto_check_table(results: dict[str, Any]) -> list[str]:
    rows = results.get("auto_check") or []
    if not rows:
        return []
    lines = ["### auto check (the Trainer's measured auto vs the fastest cell in this run)", "",
             "| model | auto chose | how | fastest measured | auto / fastest |",
             "|---|---|---|---|---:|"]
    for row in rows:
        ratio = "n/a" if row.get("ratio") is None else f"{row['ratio']:.2f}×"
        lines.append(f"| {row['model']} | {row.get('auto')} | {row.get('auto_status')} | "
                     f"{row.get('fastest')} | {ratio} |")
    return lines + [""]


def _stock_tfx_table(results: dict[str, Any]) -> list[str]:
    section = results.get("stock_tfx") or {}
    if not section:
        return []
    if section.get("status") != "ok":
        return [f"Stock TFX pipeline: {section.get('status')}: {section.get('error')}", ""]
    ratio = section.get("ratio")
    return [
        "### Default `mptfx run` vs a stock TFX pipeline (same digits, model, epochs)", "",
        "| pipeline | wall seconds (process) |", "|---|---:|",
        f"| mptfx run (10 components) | {_number(section.get('mptfx_run_seconds'), 1)} |",
        f"| stock TFX ({', '.join(section['components'])}) | "
        f"{_number(section.get('stock_tfx_seconds'), 1)} |",
        "", f"ratio (mptfx / stock): {'n/a' if ratio is None else f'{ratio:.2f}'}", "",
    ]


def render_markdown(results: dict[str, Any]) -> str:
    """All tables, then the verdicts, as one markdown document."""
    lines = _header(results)
    lines += _throughput_table(results)
    lines += _auto_check_table(results)
    lines += _time_breakdown(results)
    lines += _largest_batch_table(results)
    lines += _input_tables(results)
    lines += _overhead_table(results)
    lines += _publication_table(results)
    lines += _pipeline_table(results)
    lines += _stock_tfx_table(results)
    found = results.get("verdicts") or verdicts(results)
    if found:
        lines += ["### Verdicts", ""] + [f"- {line}" for line in found] + [""]
    for section, reason in (results.get("skipped_sections") or {}).items():
        lines.append(f"- {section}: {reason}")
    for failure in results.get("failures") or []:
        lines.append(f"- FAILED: {failure}")
    return "\n".join(lines).rstrip() + "\n"
