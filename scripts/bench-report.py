#!/usr/bin/env python3
"""Builds the results section of docs/benchmarks.md and its SVG plots from the last run.

Reads target/bench-results/*.jsonl (written by the benches and compare/examples/latency.rs; one JSON
object per line) and rewrites the text between `<!-- results:begin -->` and
`<!-- results:end -->` in docs/benchmarks.md, plus docs/benchmarks/*.svg. Standard library only.
"""
import glob
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.environ.get("SHMLOG_BENCH_RESULTS", os.path.join(ROOT, "target", "bench-results"))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
IMG = os.path.join(ROOT, "docs", "benchmarks")


def load():
    recs = {}
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                recs[(r["bench"], r["name"])] = r  # the last record of a name wins
    return recs


R = load()


def get(bench, name, field="value"):
    r = R.get((bench, name))
    if r is None:
        return None
    return r.get(field)


def pcts(bench, name, qs=("p50", "p99", "p999")):
    """The percentile fields `qs` of one record, as a dict (values None when absent)."""
    return {q: get(bench, name, q) for q in qs}


def fmt_ns(v):
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} ms"
    if v >= 1e4:
        return f"{v / 1e3:.1f} µs"
    return f"{v:.0f} ns"


def fmt_rate(v):
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.1f} M/s"
    return f"{v / 1e3:.1f} k/s"


def fmt_bw(v):
    return "–" if v is None else f"{v / 1e9:.1f} GB/s"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


def verdict(r, limit, higher_is_better):
    if r is None:
        return "not measured"
    ok = r >= limit if higher_is_better else r <= limit
    return "**met**" if ok else "**missed**"


out = []
targets = []

# The goals of the current round (issue 26, 2026-11-27), in one place. The "10x aeron-rs" of
# 2026-11-22 is retired: against aeron-rs the goal is to stay ahead (it was 2.65x before issue 26).
AERON_THROUGHPUT = 2
BARE_RING = 0.8  # throughput against the bare ring, at every term length
RTT_P50, RTT_P99 = 1.1, 1.15  # round trip against the raw cache-line ping-pong
CONCURRENT_OFFER = 1.35  # concurrent offer alone against the exclusive one


def target(what, measured, r, limit, higher):
    sign = "≥" if higher else "≤"
    targets.append(f"| {what} | {measured} | {fmt_ratio(r)} | {sign} {limit}× | {verdict(r, limit, higher)} |")


# ---- machine ---------------------------------------------------------------------------------
machine = [r for (b, n), r in R.items() if n == "machine"]
if machine:
    cpu = machine[0].get("cpu", "?")
    cores = int(machine[0].get("cores", 0))
    loads = ", ".join(f"{r['bench']} {r.get('loadavg', float('nan')):.1f}" for r in sorted(machine, key=lambda r: r["bench"]))
    files = glob.glob(os.path.join(RESULTS, "*.jsonl"))
    import time
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max(os.path.getmtime(f) for f in files))) if files else "?"
    out.append(f"Machine of the last run (finished {when}): **{cores} cores**, `{cpu}`. Load average when each bench started: {loads}.\n")

clock_cost = get("bounds", "clock_cost_ns")
if clock_cost is not None:
    out.append(
        f"Per-message timestamps: `rdtsc` (invariant TSC) calibrated against CLOCK_MONOTONIC, "
        f"{clock_cost:.1f} ns per stamp (back-to-back pair {get('bounds', 'clock_back_to_back_ns') or 0:.1f} ns); "
        f"`clock_gettime(CLOCK_MONOTONIC)` costs {get('bounds', 'clock_gettime_cost_ns') or 0:.1f} ns here.\n"
    )

# ---- vs aeron ----------------------------------------------------------------------------------
SYSTEMS = ["shmlog", "aeron-rs", "crossbeam-channel"]
out.append("### Side by side: shmlog, aeron-rs 0.1.8 + Java media driver 1.51.0, crossbeam-channel\n")
out.append("Same harness, 32 B messages, 8 MiB terms, warm-up over all three terms, two threads (CPU 0 and 1), busy spin.\n")
out.append("| workload | " + " | ".join(SYSTEMS) + " | shmlog / aeron-rs |")
out.append("|---|" + "---|" * (len(SYSTEMS) + 1))
tp = {s: get("vs_aeron", f"throughput_32B/{s}_msgs_per_s") for s in SYSTEMS}
out.append("| throughput, msgs/s | " + " | ".join(fmt_rate(tp[s]) for s in SYSTEMS) + f" | {fmt_ratio(ratio(tp['shmlog'], tp['aeron-rs']))} |")
for q, label in [("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")]:
    v = {s: get("vs_aeron", f"rtt_32B/{s}", q) for s in SYSTEMS}
    out.append(f"| round trip {label} | " + " | ".join(fmt_ns(v[s]) for s in SYSTEMS) + f" | {fmt_ratio(ratio(v['shmlog'], v['aeron-rs']))} |")
for q, label in [("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")]:
    v = {s: get("vs_aeron", f"oneway_32B/{s}", q) for s in SYSTEMS}
    out.append(f"| one-way (one in flight) {label} | " + " | ".join(fmt_ns(v[s]) for s in SYSTEMS) + f" | {fmt_ratio(ratio(v['shmlog'], v['aeron-rs']))} |")
out.append("")
it = {s: get("vs_aeron", f"interleaved_throughput_32B/{s}_msgs_per_s") for s in SYSTEMS}
it_r = get("vs_aeron", "interleaved_throughput_32B/shmlog_vs_aeron")
it_c = get("vs_aeron", "interleaved_throughput_32B/shmlog_vs_crossbeam")
if it["shmlog"] is not None:
    out.append(
        "Throughput interleaved (the three streams and receivers exist at once; 9 rounds of 2 M messages, "
        "each system in turn while the other receivers sleep; medians): "
        + ", ".join(f"{s} {fmt_rate(it[s])}" for s in SYSTEMS)
        + f"; median per-round ratio shmlog / aeron-rs **{fmt_ratio(it_r)}**, shmlog / crossbeam-channel {fmt_ratio(it_c)}. "
        "The target is judged on this ratio; the one-shot row of the table above can be minutes apart from its neighbour.\n"
    )
rt_i = {s: pcts("vs_aeron", f"interleaved_rtt_32B/{s}") for s in SYSTEMS}
rt_r50, rt_r99 = get("vs_aeron", "interleaved_rtt_32B/shmlog_vs_aeron_p50"), get("vs_aeron", "interleaved_rtt_32B/shmlog_vs_aeron_p99")
if rt_i["shmlog"]["p50"] is not None:
    out.append(
        "Round trips interleaved (three ping/pong pairs and echo threads at once; 9 rounds of 100 000 timed round "
        "trips per system, the other echo threads asleep): p50 / p99 / p99.9 "
        + ", ".join(f"{s} {fmt_ns(rt_i[s]['p50'])} / {fmt_ns(rt_i[s]['p99'])} / {fmt_ns(rt_i[s]['p999'])}" for s in SYSTEMS)
        + f" (pooled); median per-round ratio shmlog / aeron-rs p50 **{fmt_ratio(rt_r50)}**, p99 **{fmt_ratio(rt_r99)}**.\n"
    )
if it_r is not None:
    target("throughput 32 B, two threads, vs aeron-rs (interleaved)", f"{fmt_rate(it['shmlog'])} vs {fmt_rate(it['aeron-rs'])}", it_r, AERON_THROUGHPUT, True)
else:
    target("throughput 32 B, two threads, vs aeron-rs", f"{fmt_rate(tp['shmlog'])} vs {fmt_rate(tp['aeron-rs'])}", ratio(tp["shmlog"], tp["aeron-rs"]), AERON_THROUGHPUT, True)

# ---- latency example ---------------------------------------------------------------------------
lat_modes = sorted({n.split("/")[0] for (b, n) in R if b == "latency" and "/" in n})
# The latency example runs the three systems in turns with the Aeron driver up throughout, then
# shmlog once more after the driver stopped ("shmlog-alone": as deployed, no driver on the host).
# "bare-ring" is the floor: a bare seq-in-slot ring behind the same harness, in the same turns.
LAT_SYSTEMS = SYSTEMS + ["bare-ring", "shmlog-alone"]
LAT_LABEL = {"shmlog-alone": "shmlog alone (driver stopped)", "bare-ring": "bare ring (the floor)"}
if lat_modes:
    out.append("### One-way latency (compare/examples/latency.rs, HdrHistogram)\n")
    out.append("| mode | system | p50 | p90 | p99 | p99.9 | max | p50 / aeron-rs | p99 / aeron-rs | p99.9 / aeron-rs |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for mode in lat_modes:
        a = pcts("latency", f"{mode}/aeron-rs")
        for s in LAT_SYSTEMS:
            if ("latency", f"{mode}/{s}") not in R:
                continue
            v = pcts("latency", f"{mode}/{s}", ("p50", "p90", "p99", "p999", "max"))
            rs = [ratio(v[q], a[q]) if s != "aeron-rs" else None for q in ["p50", "p99", "p999"]]
            out.append(
                f"| {mode} | {LAT_LABEL.get(s, s)} | " + " | ".join(fmt_ns(v[q]) for q in ["p50", "p90", "p99", "p999", "max"]) + " | " + " | ".join(fmt_ratio(r) for r in rs) + " |"
            )
        sv = pcts("latency", f"{mode}/shmlog")
        short = "burst" if mode.startswith("burst") else "fixed rate"
        target(f"one-way {short} p50 vs aeron-rs", f"{fmt_ns(sv['p50'])} vs {fmt_ns(a['p50'])}", ratio(sv["p50"], a["p50"]), 0.7, False)
        target(f"one-way {short} p99 vs aeron-rs", f"{fmt_ns(sv['p99'])} vs {fmt_ns(a['p99'])}", ratio(sv["p99"], a["p99"]), 0.7, False)
        target(f"one-way {short} p99.9 vs aeron-rs", f"{fmt_ns(sv['p999'])} vs {fmt_ns(a['p999'])}", ratio(sv["p999"], a["p999"]), 0.5, False)
    out.append("")

# ---- throughput vs the bare ring ----------------------------------------------------------------
out.append("### Throughput, 32 B, against the bare ring (measured right next to it)\n")
out.append("| term | two threads | bare ring | ratio | two processes |")
out.append("|---|---|---|---|---|")
for t in ["64KiB", "1MiB", "64MiB"]:
    s = get("throughput", f"throughput_32B_threads_{t}_msgs_per_s")
    b = get("throughput", f"throughput_bare_ring_next_to_{t}_msgs_per_s")
    p = get("throughput", f"throughput_32B_processes_{t}_msgs_per_s")
    out.append(f"| {t} | {fmt_rate(s)} | {fmt_rate(b)} | {fmt_ratio(ratio(s, b))} | {fmt_rate(p)} |")
    target(f"throughput 32 B, two threads, {t} term vs bare ring (next to it)", f"{fmt_rate(s)} vs {fmt_rate(b)}", ratio(s, b), BARE_RING, True)
out.append("")
pk = "throughput_paired_32B_threads_1MiB"
ps, pb, pr = (get("throughput", f"{pk}_{x}") for x in ["msgs_per_s", "bare_ring_msgs_per_s", "ratio"])
if pr is not None:
    out.append(
        f"Interleaved (rounds of 2 M messages, shmlog then the bare ring, median over 15 rounds; the "
        f"figure the target is judged on): shmlog {fmt_rate(ps)}, bare ring {fmt_rate(pb)}, median of the "
        f"per-round ratios **{fmt_ratio(pr)}**.\n"
    )
    target("throughput 32 B, two threads, 1 MiB term vs bare ring (interleaved)", f"{fmt_rate(ps)} vs {fmt_rate(pb)}", pr, BARE_RING, True)
bl2 = get("bounds", "bare_ring_l2_4096_msgs_per_s")
b64 = get("bounds", "bare_ring_64MiB_msgs_per_s")
if bl2:
    out.append(f"The `bounds` bench measured the bare ring at {fmt_rate(bl2)} (4096 slots, in L2) and {fmt_rate(b64)} (64 MiB).\n")

# ---- round trip vs raw ping-pong ----------------------------------------------------------------
out.append("### Round trip against the raw cache-line ping-pong (measured right before, same CPUs)\n")
out.append("| topology, size | shmlog p50 | p99 | p99.9 | raw p50 | raw p99 | p50 ratio | p99 ratio |")
out.append("|---|---|---|---|---|---|---|---|")
for topo in ["threads", "processes"]:
    for size in ["32B", "100B"]:
        n = f"ping_pong/{topo}/{size}"
        s = pcts("ping_pong", f"{n}/rtt")
        r = pcts("ping_pong", f"{n}/raw_bound_rtt", ("p50", "p99"))
        out.append(
            f"| {topo}, {size} | {fmt_ns(s['p50'])} | {fmt_ns(s['p99'])} | {fmt_ns(s['p999'])} | {fmt_ns(r['p50'])} | {fmt_ns(r['p99'])} | {fmt_ratio(ratio(s['p50'], r['p50']))} | {fmt_ratio(ratio(s['p99'], r['p99']))} |"
        )
out.append("")
pp = "ping_pong/paired/threads/32B"
r50, r99 = get("ping_pong", f"{pp}/ratio_p50"), get("ping_pong", f"{pp}/ratio_p99")
s = pcts("ping_pong", f"{pp}/rtt")
r = pcts("ping_pong", f"{pp}/raw_bound_rtt")
if r50 is not None:
    out.append(
        "Interleaved (21 rounds of 200 000 round trips, raw ping-pong then shmlog on the same CPUs; the "
        "figures the targets are judged on are the medians of the per-round ratios): "
        f"shmlog p50/p99/p99.9 {fmt_ns(s['p50'])} / {fmt_ns(s['p99'])} / {fmt_ns(s['p999'])}, raw "
        f"{fmt_ns(r['p50'])} / {fmt_ns(r['p99'])} / {fmt_ns(r['p999'])} (all rounds pooled); median per-round "
        f"ratio p50 **{fmt_ratio(r50)}**, p99 **{fmt_ratio(r99)}**.\n"
    )
    target("round trip 32 B p50 vs raw ping-pong (interleaved)", f"{fmt_ns(s['p50'])} vs {fmt_ns(r['p50'])} pooled", r50, RTT_P50, False)
    target("round trip 32 B p99 vs raw ping-pong (interleaved)", f"{fmt_ns(s['p99'])} vs {fmt_ns(r['p99'])} pooled", r99, RTT_P99, False)
    l50, l99 = get("ping_pong", f"{pp}/log_ratio_p50"), get("ping_pong", f"{pp}/log_ratio_p99")
    lb = pcts("ping_pong", f"{pp}/log_bound_rtt")
    if l50 is not None:
        out.append(
            "In the same rounds, the raw ping-pong moving to the next 64-byte line with every message "
            "(a ring as long as the term: what any log pays for a fresh line per message) measured "
            f"{fmt_ns(lb['p50'])} / {fmt_ns(lb['p99'])} / {fmt_ns(lb['p999'])}, **{fmt_ratio(ratio(lb['p50'], r['p50']))}** "
            f"the same-line one at p50 (pooled); shmlog against it: median per-round ratio p50 **{fmt_ratio(l50)}**, "
            f"p99 **{fmt_ratio(l99)}**.\n"
        )
else:
    s = pcts("ping_pong", "ping_pong/threads/32B/rtt", ("p50", "p99"))
    r = pcts("ping_pong", "ping_pong/threads/32B/raw_bound_rtt", ("p50", "p99"))
    target("round trip 32 B p50 vs raw ping-pong", f"{fmt_ns(s['p50'])} vs {fmt_ns(r['p50'])}", ratio(s["p50"], r["p50"]), RTT_P50, False)
    target("round trip 32 B p99 vs raw ping-pong", f"{fmt_ns(s['p99'])} vs {fmt_ns(r['p99'])}", ratio(s["p99"], r["p99"]), RTT_P99, False)

t64k = pcts("ping_pong", "ping_pong/term_64KiB/32B/rtt")
t64m = pcts("ping_pong", "ping_pong/term_64MiB/32B/rtt")
out.append("Round trip by term length (32 B, threads, warm-up over all three terms):\n")
out.append("| term | p50 | p99 | p99.9 |")
out.append("|---|---|---|---|")
out.append(f"| 64 KiB | {fmt_ns(t64k['p50'])} | {fmt_ns(t64k['p99'])} | {fmt_ns(t64k['p999'])} |")
out.append(f"| 64 MiB | {fmt_ns(t64m['p50'])} | {fmt_ns(t64m['p99'])} | {fmt_ns(t64m['p999'])} |")
out.append("")
tp_ = "ping_pong/paired/term_64KiB_vs_64MiB/32B"
r999 = get("ping_pong", f"{tp_}/ratio_p999")
if r999 is not None:
    a = pcts("ping_pong", f"{tp_}/64KiB_rtt")
    b = pcts("ping_pong", f"{tp_}/64MiB_rtt")
    out.append(
        "Alternated (11 rounds of 200 000 round trips on each, both warmed over all three terms; the figure "
        f"the target is judged on): 64 KiB p50/p99/p99.9 {fmt_ns(a['p50'])} / {fmt_ns(a['p99'])} / {fmt_ns(a['p999'])}, "
        f"64 MiB {fmt_ns(b['p50'])} / {fmt_ns(b['p99'])} / {fmt_ns(b['p999'])} (pooled); median per-round p99.9 ratio "
        f"**{fmt_ratio(r999)}**.\n"
    )
    target("64 KiB term vs 64 MiB term, round trip p99.9 (alternated)", f"{fmt_ns(a['p999'])} vs {fmt_ns(b['p999'])} pooled", r999, 1.2, False)
else:
    target("64 KiB term vs 64 MiB term, round trip p99.9", f"{fmt_ns(t64k['p999'])} vs {fmt_ns(t64m['p999'])}", ratio(t64k["p999"], t64m["p999"]), 1.2, False)

# ---- offer/poll -------------------------------------------------------------------------------------
out.append("### One thread, offer then poll (1 MiB term)\n")
sizes = [0, 32, 100, 256, 1024, 4096, 65536]
out.append("| payload | offer ns | offer GB/s | try_claim ns | offer_vectored ns |")
out.append("|---|---|---|---|---|")
for sz in sizes:
    o = get("offer_poll", f"offer_poll/offer/{sz}B", "ns_per_msg")
    ob = get("offer_poll", f"offer_poll/offer/{sz}B", "bytes_per_s")
    c = get("offer_poll", f"offer_poll/try_claim/{sz}B", "ns_per_msg")
    v = get("offer_poll", f"offer_poll/offer_vectored/{sz}B", "ns_per_msg")
    f = lambda x: "–" if x is None else f"{x:.1f}"
    out.append(f"| {sz} B | {f(o)} | {fmt_bw(ob) if sz else '–'} | {f(c)} | {f(v)} |")
mhot = get("offer_poll", "memcpy_64KiB_hot_bytes_per_s")
mwalk = get("offer_poll", "memcpy_64KiB_walk_3MiB_bytes_per_s")
o64 = get("offer_poll", "offer_poll/offer/65536B", "bytes_per_s")
out.append(f"\nmemcpy of 64 KiB in the same run: {fmt_bw(mhot)} hot (same destination), {fmt_bw(mwalk)} walking a 3 MiB buffer (the log's footprint).\n")
target("64 KiB messages vs memcpy (same 3 MiB footprint)", f"{fmt_bw(o64)} vs {fmt_bw(mwalk)}", ratio(o64, mwalk), 0.5, True)

# ---- fanout -------------------------------------------------------------------------------------------
NS = [1, 2, 4, 8, 16, 32, 64]
out.append("### Fan-out: the publisher's cost per offer with N subscribers\n")
out.append("| N | shmlog, Backoff readers | shmlog, Yielding readers | UDP unicast loopback (N × sendto) |")
out.append("|---|---|---|---|")
fan = {k: [get("fanout", f"fanout/{k}/{n}", "mean") for n in NS] for k in ["shmlog_backoff", "shmlog_yielding", "udp_unicast_loopback"]}
for i, n in enumerate(NS):
    out.append(f"| {n} | " + " | ".join(fmt_ns(fan[k][i]) if fan[k][i] is None or fan[k][i] >= 100 else f"{fan[k][i]:.1f} ns" for k in fan) + " |")
out.append("")
for k in ["shmlog_backoff", "shmlog_yielding"]:
    paired = R.get(("fanout", f"fanout/paired/{k}"))
    idle_name = k.split("_")[1]
    if paired:
        out.append(
            f"{idle_name.capitalize()} readers, 1 and 64 subscribers alternated (7 rounds, fresh streams, "
            f"100 batches each; the figure the target is judged on): {paired['one']:.1f} vs {paired['many']:.1f} ns "
            f"per offer, median per-round ratio **{fmt_ratio(paired['ratio'])}**.\n"
        )
        target(f"fan-out ({idle_name}) cost per offer, 64 vs 1 subscriber (alternated)", f"{paired['many']:.1f} vs {paired['one']:.1f} ns", paired["ratio"], 1.1, False)
    else:
        a, b = fan[k][-1], fan[k][0]
        target(f"fan-out ({idle_name}) cost per offer, 64 vs 1 subscriber", f"{a or 0:.1f} vs {b or 0:.1f} ns", ratio(a, b), 1.1, False)

# ---- many writers ------------------------------------------------------------------------------------------
oo = R.get(("concurrent", "offer_only_64B"))
if oo:
    out.append("### Many writers: the concurrent offer alone against the exclusive one\n")
    out.append(
        f"One thread, 64 B, batches of offers timed (each polled back untimed), the two writers alternated "
        f"over rounds: exclusive {oo['exclusive_ns']:.1f} ns, concurrent {oo['concurrent_ns']:.1f} ns per offer, "
        f"median per-round ratio **{fmt_ratio(oo['ratio'])}**. The floor measured in the same rounds (one "
        f"uncontended CAS more than a plain store, {oo['cas_extra_ns']:.1f} ns) is {fmt_ratio(oo['floor_ratio'])}.\n"
    )
    target("concurrent offer alone vs exclusive offer (alternated)", f"{oo['concurrent_ns']:.1f} vs {oo['exclusive_ns']:.1f} ns", oo["ratio"], CONCURRENT_OFFER, False)

# ---- idle -----------------------------------------------------------------------------------------------
idle = sorted(n for (b, n) in R if b == "idle" and n.startswith("idle/"))
if idle:
    out.append("### Idle strategies: wake-up latency after a quiet gap\n")
    out.append("| gap | strategy | p50 | p90 | p99 | max |")
    out.append("|---|---|---|---|---|---|")
    for n in idle:
        gap, strat = n.split("/")[1].replace("wakeup_gap_", ""), n.split("/")[2]
        out.append(f"| {gap} | {strat} | " + " | ".join(fmt_ns(get("idle", n, q)) for q in ["p50", "p90", "p99", "max"]) + " |")
    out.append("")

# ---- bounds ---------------------------------------------------------------------------------------------
raw = pcts("bounds", "raw_pingpong_rtt")
out.append("### Physical bounds (bounds bench)\n")
out.append("| bound | value |")
out.append("|---|---|")
out.append(f"| raw cache-line ping-pong RTT p50 / p99 / p99.9 | {fmt_ns(raw['p50'])} / {fmt_ns(raw['p99'])} / {fmt_ns(raw['p999'])} |")
out.append(f"| bare ring, 32 B in 64 B slots, L2 / 64 MiB | {fmt_rate(bl2)} / {fmt_rate(b64)} |")
out.append(f"| memcpy 64 KiB hot / walking 3 MiB | {fmt_bw(get('bounds', 'memcpy_64KiB_hot_bytes_per_s'))} / {fmt_bw(get('bounds', 'memcpy_64KiB_walk_3MiB_bytes_per_s'))} |")
for cpu in [0, 1]:
    g = R.get(("bounds", f"scheduler_gaps_cpu{cpu}"))
    if g:
        out.append(
            f"| a thread spinning alone on CPU {cpu} for {g['seconds']:.0f} s: gaps > 50 µs (time it did not run) | "
            f"{g['count']:.0f} gaps, {g['lost_ms']:.1f} ms lost ({100 * g['lost_ms'] / (1000 * g['seconds']):.2f} %), largest {fmt_ns(g['max_ns'])} |"
        )
out.append("")

out.insert(0, "### Targets\n\n| target | measured | ratio | goal | |\n|---|---|---|---|---|\n" + "\n".join(targets) + "\n")


# ---- SVG plots ------------------------------------------------------------------------------------------
def svg_lines(path, title, xlabels, series, ylabel):
    """A small log-y line chart. series: [(name, colour, [values])]."""
    W, H, L, Rm, T, B = 640, 360, 70, 170, 40, 50
    vals = [v for _, _, vs in series for v in vs if v]
    if not vals:
        return False
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    hi = max(hi, lo + 1)
    px = lambda i: L + (W - L - Rm) * (i / max(1, len(xlabels) - 1))
    py = lambda v: T + (H - T - B) * (1 - (math.log10(v) - lo) / (hi - lo))
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for e in range(lo, hi + 1):
        y = py(10 ** e)
        s.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - Rm}" y2="{y:.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_ns(10 ** e)}</text>')
    for i, xl in enumerate(xlabels):
        s.append(f'<text x="{px(i):.1f}" y="{H - B + 18}" text-anchor="middle">{xl}</text>')
    s.append(f'<text x="{L + (W - L - Rm) / 2}" y="{H - 10}" text-anchor="middle">{ylabel}</text>')
    for k, (name, colour, vs) in enumerate(series):
        pts = [(px(i), py(v)) for i, v in enumerate(vs) if v]
        if pts:
            s.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
            for x, y in pts:
                s.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
        s.append(f'<rect x="{W - Rm + 12}" y="{T + 18 * k}" width="12" height="12" fill="{colour}"/>')
        s.append(f'<text x="{W - Rm + 30}" y="{T + 18 * k + 10}">{name}</text>')
    s.append("</svg>")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")
    return True


plots = []
if svg_lines(os.path.join(IMG, "fanout.svg"), "Publisher cost per message vs subscribers (log scale)", [str(n) for n in NS],
             [("shmlog, Backoff", "#1f77b4", fan["shmlog_backoff"]), ("shmlog, Yielding", "#2ca02c", fan["shmlog_yielding"]),
              ("UDP, N × sendto", "#d62728", fan["udp_unicast_loopback"])], "subscribers"):
    plots.append("![fan-out](benchmarks/fanout.svg)")
if lat_modes:
    qs = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max")]
    series = []
    colours = {"shmlog": "#1f77b4", "aeron-rs": "#d62728", "crossbeam-channel": "#7f7f7f", "shmlog-alone": "#2ca02c", "bare-ring": "#000000"}
    for mode in lat_modes:
        dash = "burst" if mode.startswith("burst") else "rate"
        for s in LAT_SYSTEMS:
            if ("latency", f"{mode}/{s}") in R:
                series.append((f"{LAT_LABEL.get(s, s)}, {dash}", colours[s], [get("latency", f"{mode}/{s}", q) for q, _ in qs]))
    for mode in lat_modes:
        ser = [x for x in series if x[0].endswith("burst" if mode.startswith("burst") else "rate")]
        fname = "latency_burst.svg" if mode.startswith("burst") else "latency_rate.svg"
        if svg_lines(os.path.join(IMG, fname), f"One-way latency, {mode} (log scale)", [l for _, l in qs], ser, "percentile"):
            plots.append(f"![{mode}](benchmarks/{fname})")
if plots:
    out.append("### Plots\n")
    out.extend(p + "\n" for p in plots)

text = "\n".join(out)
if "--print" in sys.argv:
    print(text)
    sys.exit(0)
doc = open(DOC).read() if os.path.exists(DOC) else "<!-- results:begin -->\n<!-- results:end -->\n"
a, b = doc.index("<!-- results:begin -->"), doc.index("<!-- results:end -->")
doc = doc[: a + len("<!-- results:begin -->")] + "\n" + text + "\n" + doc[b:]
with open(DOC, "w") as f:
    f.write(doc)
print(f"updated {DOC}")
