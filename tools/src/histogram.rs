//! Latency statistics: exact summaries over recorded samples, HdrHistogram's percentile
//! distribution text (`.hgrm`), and a standalone SVG plot of latency by percentile.
//!
//! Samples are nanoseconds; everything shown to people is in microseconds.

use hdrhistogram::Histogram;
use std::fmt::Write;

/// Percentiles reported for every summary.
pub(crate) const PERCENTILES: [(f64, &str); 5] =
    [(50.0, "p50"), (90.0, "p90"), (95.0, "p95"), (99.0, "p99"), (99.9, "p99.9")];

/// Count, mean, extremes and [`PERCENTILES`] of a set of samples (nanoseconds).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Summary {
    pub count: usize,
    pub mean: f64,
    pub min: u64,
    pub max: u64,
    /// Values at [`PERCENTILES`], in that order.
    pub percentiles: [u64; 5],
}

/// Summarises `samples` exactly (sorts a copy). `None` when there are none.
pub(crate) fn summarize(samples: &[u64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let sum: u128 = sorted.iter().map(|&v| u128::from(v)).sum();
    Some(Summary {
        count: sorted.len(),
        mean: sum as f64 / sorted.len() as f64,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        percentiles: PERCENTILES.map(|(p, _)| percentile_of_sorted(&sorted, p)),
    })
}

/// The nearest-rank percentile `p` (0..=100) of a sorted, non-empty slice: the smallest value
/// such that at least `p`% of the samples are less than or equal to it.
pub(crate) fn percentile_of_sorted(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty());
    // The small slack keeps decimal percentiles exact: 99.9 / 100 * 1000 is 999.0000000000001.
    let rank = (p * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Splits `samples` (in arrival order) into `groups` consecutive runs whose sizes differ by at
/// most one, and summarises each; fewer groups when there are fewer samples.
pub(crate) fn group_summaries(samples: &[u64], groups: usize) -> Vec<Summary> {
    let groups = groups.min(samples.len());
    (0..groups)
        .filter_map(|g| {
            let start = g * samples.len() / groups;
            let end = (g + 1) * samples.len() / groups;
            summarize(&samples[start..end])
        })
        .collect()
}

/// Nanoseconds as microseconds.
pub(crate) fn us(ns: f64) -> f64 {
    ns / 1000.0
}

/// The header and one line of the summary table.
pub(crate) fn table_header(first: &str) -> String {
    let mut s = format!("{first:<8} {:>9} {:>10} {:>10}", "count", "mean", "min");
    for (_, name) in PERCENTILES {
        let _ = write!(s, " {name:>10}");
    }
    s.push_str(&format!(" {:>10}", "max"));
    s
}

/// One line of the summary table, values in microseconds.
pub(crate) fn table_row(first: &str, s: &Summary) -> String {
    let mut line = format!("{first:<8} {:>9} {:>10.3} {:>10.3}", s.count, us(s.mean), us(s.min as f64));
    for v in s.percentiles {
        let _ = write!(line, " {:>10.3}", us(v as f64));
    }
    let _ = write!(line, " {:>10.3}", us(s.max as f64));
    line
}

/// A histogram of `samples` with 3 significant digits, growing as needed.
pub(crate) fn histogram(samples: &[u64]) -> Histogram<u64> {
    let high = samples.iter().copied().max().unwrap_or(0).max(2);
    let mut h = Histogram::<u64>::new_with_bounds(1, high, 3).expect("valid bounds: 1 < high, 3 digits");
    for &v in samples {
        h.saturating_record(v);
    }
    h
}

/// HdrHistogram's percentile distribution text (what `outputPercentileDistribution` writes and
/// the HdrHistogram plotter reads), with values in microseconds and 5 ticks per half distance.
pub(crate) fn hgrm(h: &Histogram<u64>) -> String {
    const SCALE: f64 = 1000.0; // ns -> µs
    let digits = usize::from(h.sigfig());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let value = v.value_iterated_to() as f64 / SCALE;
        let q = v.quantile_iterated_to();
        if q < 1.0 {
            let _ = writeln!(out, "{value:>12.digits$} {q:>2.12} {total:>10} {:>14.2}", 1.0 / (1.0 - q));
        } else {
            let _ = writeln!(out, "{value:>12.digits$} {q:>2.12} {total:>10}");
        }
    }
    // HdrHistogram's sub-bucket count: the power of two that holds 2 * 10^digits.
    let sub_buckets = (2.0 * 10f64.powi(digits as i32)).log2().ceil().exp2() as u64;
    let _ = writeln!(
        out,
        "#[Mean    = {:>12.digits$}, StdDeviation   = {:>12.digits$}]",
        h.mean() / SCALE,
        h.stdev() / SCALE
    );
    let _ = writeln!(
        out,
        "#[Max     = {:>12.digits$}, Total count    = {:>12}]",
        h.max() as f64 / SCALE,
        h.len()
    );
    let _ = writeln!(out, "#[Buckets = {:>12}, SubBuckets     = {:>12}]", h.buckets(), sub_buckets);
    out
}

/// `(quantile, microseconds)` points of the latency-by-percentile curve, quantiles below 1.
pub(crate) fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    // The maximum sits at the last sample's quantile, 1 - 1/count; the iteration's finer ticks
    // past it would only stretch the axis.
    let last = 1.0 - 1.0 / h.len().max(2) as f64;
    let mut points: Vec<(f64, f64)> = h
        .iter_quantiles(20)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to() as f64 / 1000.0))
        .filter(|(q, _)| *q < last)
        .collect();
    points.push((last, h.max() as f64 / 1000.0));
    points
}

/// A standalone SVG of latency (µs, linear y) by percentile (x on HdrHistogram's log scale of
/// `1/(1-quantile)`: 0%, 90%, 99%, 99.9%, ... equally spaced).
pub(crate) fn svg(points: &[(f64, f64)], title: &str) -> String {
    const W: f64 = 800.0;
    const H: f64 = 480.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 60.0;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let inverse = |q: f64| (1.0 / (1.0 - q).max(1e-12)).log10();
    // Decades on the x axis: at least 0% .. 99%.
    let decades = points.iter().map(|&(q, _)| inverse(q)).fold(2.0f64, f64::max).ceil().min(12.0);
    let max_y = nice_ceiling(points.iter().map(|&(_, v)| v).fold(0.0, f64::max));
    let x_of = |q: f64| LEFT + inverse(q) / decades * plot_w;
    let y_of = |v: f64| TOP + plot_h - v / max_y * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="25" text-anchor="middle" font-size="16">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    // Grid and labels.
    for d in 0..=decades as u32 {
        let x = LEFT + f64::from(d) / decades * plot_w;
        let label = percentile_label(d);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            TOP + plot_h
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            TOP + plot_h + 18.0
        );
    }
    for i in 0..=5 {
        let v = max_y * f64::from(i) / 5.0;
        let y = y_of(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            LEFT + plot_w
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            y + 4.0,
            fmt_axis(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        LEFT + plot_w / 2.0,
        H - 15.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">latency (µs)</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );
    // The data.
    let mut d = String::new();
    for (i, &(q, v)) in points.iter().enumerate() {
        let _ = write!(d, "{}{:.2},{:.2} ", if i == 0 { "M" } else { "L" }, x_of(q), y_of(v));
    }
    let _ = writeln!(
        s,
        r##"<path class="latency" d="{}" fill="none" stroke="#1f77b4" stroke-width="2"/>"##,
        d.trim_end()
    );
    s.push_str("</svg>\n");
    s
}

/// "0%", "90%", "99%", "99.9%", ... for decade `d` of `1/(1-q)`.
fn percentile_label(d: u32) -> String {
    match d {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        d => format!("99.{}%", "9".repeat(d as usize - 2)).replace("99.%", "99%"),
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `v` (and above 0).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|&c| c >= v).unwrap_or(10.0 * p)
}

fn fmt_axis(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_owned()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_one_to_a_thousand() {
        let samples: Vec<u64> = (1..=1000).rev().collect();
        let s = summarize(&samples).unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!((s.min, s.max), (1, 1000));
        assert!((s.mean - 500.5).abs() < 1e-9);
        assert_eq!(s.percentiles, [500, 900, 950, 990, 999]);
        assert_eq!(summarize(&[]), None);
        let one = summarize(&[42]).unwrap();
        assert_eq!(one.percentiles, [42; 5]);
        assert_eq!((one.min, one.max, one.mean), (42, 42, 42.0));
    }

    #[test]
    fn a_tail_shows_only_in_the_high_percentiles() {
        // 9 990 fast samples and 10 slow ones: p99 stays fast, p99.9 sees the tail.
        let mut samples = vec![100u64; 9990];
        samples.extend([1_000_000u64; 10]);
        let s = summarize(&samples).unwrap();
        assert_eq!(s.percentiles, [100, 100, 100, 100, 100]);
        samples.push(1_000_000);
        let s = summarize(&samples).unwrap();
        assert_eq!(s.percentiles[4], 1_000_000, "11 of 10 001 above p99.9");
        assert_eq!(s.max, 1_000_000);
    }

    #[test]
    fn groups_are_consecutive_and_cover_everything() {
        let samples: Vec<u64> = (0..1003).collect();
        let g = group_summaries(&samples, 20);
        assert_eq!(g.len(), 20);
        assert_eq!(g.iter().map(|s| s.count).sum::<usize>(), 1003);
        assert!(g.iter().all(|s| s.count == 50 || s.count == 51));
        assert!(g.windows(2).all(|w| w[0].max < w[1].min), "time order is kept");
        assert_eq!(group_summaries(&samples[..3], 20).len(), 3);
        assert!(group_summaries(&[], 20).is_empty());
    }

    #[test]
    fn hgrm_has_the_hdrhistogram_shape() {
        let samples: Vec<u64> = (1..=10_000).map(|i| i * 10).collect();
        let text = hgrm(&histogram(&samples));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("Value") && lines[0].contains("1/(1-Percentile)"));
        assert!(lines[1].is_empty());
        let first: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(first.len(), 4);
        assert_eq!(first[1], "0.000000000000");
        let last_data = lines.iter().rev().find(|l| !l.starts_with('#')).unwrap();
        let last: Vec<&str> = last_data.split_whitespace().collect();
        assert_eq!((last[1], last[2]), ("1.000000000000", "10000"));
        assert!(text.contains("#[Max     =      100.031, Total count    =        10000]"), "{text}");
        assert!(text.contains("SubBuckets     =         2048]"));
    }

    #[test]
    fn svg_is_well_formed_with_the_data_path() {
        let samples: Vec<u64> =
            (1..=100_000).map(|i| 200 + i % 1000 + if i % 5000 == 0 { 50_000 } else { 0 }).collect();
        let h = histogram(&samples);
        let pts = curve(&h);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "monotone curve");
        let svg = svg(&pts, "a <test> & more");
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains(r#"<path class="latency" d="M"#));
        assert!(svg.contains("99.99%") && svg.contains("&lt;test&gt; &amp;"));
        assert_balanced(&svg);
    }

    /// Checks that every element is closed in order (a minimal XML well-formedness check).
    fn assert_balanced(xml: &str) {
        let mut stack = Vec::new();
        let mut rest = xml;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').expect("unterminated tag") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim().to_owned()), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_owned());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    #[test]
    fn labels_and_axis_helpers() {
        assert_eq!(
            (percentile_label(0), percentile_label(1), percentile_label(2)),
            ("0%".into(), "90%".into(), "99%".into())
        );
        assert_eq!(percentile_label(4), "99.99%");
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(0.021), 0.025);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(fmt_axis(2.5), "2.5");
        assert_eq!(fmt_axis(10.0), "10");
    }
}
