//! The OpenMetrics text format (what Prometheus scrapes), written by hand: metric families
//! with `# TYPE`, `# UNIT` and `# HELP`, their samples grouped under them whatever order they
//! were added in, label values escaped, `# EOF` last. Knows nothing of shmlog: `metrics.rs`
//! says which figures become which families.

use std::collections::HashMap;
use std::fmt::Write;

/// An OpenMetrics metric type (the ones the tool uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A value that goes up and down; one sample, the family's name.
    Gauge,
    /// A count that only goes up (and restarts from 0): samples `<name>_total` and, when known,
    /// `<name>_created` (when it started counting, seconds since the Unix epoch).
    Counter,
    /// Facts as labels: one sample `<name>_info` of value 1.
    Info,
    /// One of several states: a sample per state, labelled `<name>="<state>"`, 1 for the
    /// current one and 0 for the others.
    StateSet,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Info => "info",
            Kind::StateSet => "stateset",
        }
    }
}

/// What a family is: its name (a counter's without `_total`, an info's without `_info`), type,
/// unit (the name's last word) and help text.
#[derive(Debug)]
pub(crate) struct Meta {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<&'static str>,
    pub help: &'static str,
}

impl Meta {
    /// Why this family breaks the format's naming rules, if it does (checked by the tests for
    /// every family the tool declares).
    #[cfg(test)]
    pub(crate) fn naming_error(&self) -> Option<String> {
        let name_ok = !self.name.is_empty()
            && !self.name.starts_with(|c: char| c.is_ascii_digit())
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if !name_ok {
            return Some(format!("{}: not a metric name", self.name));
        }
        for (kind, suffix) in [(Kind::Counter, "_total"), (Kind::Counter, "_created"), (Kind::Info, "_info")]
        {
            if self.kind == kind && self.name.ends_with(suffix) {
                return Some(format!("{}: the {suffix} suffix is the sample's, not the family's", self.name));
            }
        }
        match self.unit {
            Some(_) if matches!(self.kind, Kind::Info | Kind::StateSet) => {
                Some(format!("{}: an info or stateset has no unit", self.name))
            }
            Some(unit) if !self.name.ends_with(&format!("_{unit}")) => {
                Some(format!("{}: a family's name ends with its unit ({unit})", self.name))
            }
            // Help is an escaped string: these three would need escapes; the tool's texts have none.
            _ if self.help.contains(['\n', '\\', '"']) => Some(format!("{}: help needs escaping", self.name)),
            _ => None,
        }
    }
}

/// A sample's value: exact integers (positions, counters) or a float (times in seconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    Int(i128),
    Float(f64),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v.into())
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v.into())
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(v as i128)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl Value {
    fn is_negative(self) -> bool {
        match self {
            Value::Int(v) => v < 0,
            Value::Float(v) => v < 0.0 || v.is_nan(),
        }
    }

    fn write(self, out: &mut String) {
        let _ = match self {
            Value::Int(v) => write!(out, "{v}"),
            Value::Float(v) if v.is_nan() => write!(out, "NaN"),
            Value::Float(v) if v.is_infinite() => write!(out, "{}Inf", if v > 0.0 { "+" } else { "-" }),
            // Rust prints the shortest decimal that reads back as the same number, never in
            // exponent form: a valid OpenMetrics number.
            Value::Float(v) => write!(out, "{v}"),
        };
    }
}

/// Labels of a sample, in order: (name, value). Names are the tool's own; values are escaped.
pub(crate) type Labels<'a> = [(&'a str, &'a str)];

/// Writes `"value"` with `\`, `"` and line feeds escaped, as label values must be.
fn write_label_value(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One sample line: `name{labels} value`.
fn write_sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &Labels,
    extra: Option<(&str, &str)>,
    v: Value,
) {
    out.push_str(name);
    out.push_str(suffix);
    let all = labels.iter().copied().chain(extra);
    let mut first = true;
    for (k, value) in all {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push('=');
        write_label_value(out, value);
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    v.write(out);
    out.push('\n');
}

/// An exposition being built: families in the order of their first sample, each family's
/// samples in the order they were added (so every label set's samples stay together, as the
/// format requires, when each label set is added once per family).
#[derive(Default)]
pub(crate) struct Exposition {
    families: Vec<(&'static Meta, String)>,
    index: HashMap<&'static str, usize>,
}

impl Exposition {
    fn samples(&mut self, meta: &'static Meta, kind: Kind) -> &mut String {
        debug_assert_eq!(meta.kind, kind, "{} is declared a {:?}", meta.name, meta.kind);
        let i = *self.index.entry(meta.name).or_insert_with(|| {
            self.families.push((meta, String::new()));
            self.families.len() - 1
        });
        &mut self.families[i].1
    }

    /// A gauge's sample.
    pub(crate) fn gauge(&mut self, meta: &'static Meta, labels: &Labels, value: impl Into<Value>) {
        write_sample(self.samples(meta, Kind::Gauge), meta.name, "", labels, None, value.into());
    }

    /// A counter's `_total` and, if `created` is given, its `_created` (seconds since the Unix
    /// epoch). A negative count (a forged word of shared memory) is left out: counters cannot be.
    pub(crate) fn counter(
        &mut self,
        meta: &'static Meta,
        labels: &Labels,
        total: impl Into<Value>,
        created: Option<f64>,
    ) {
        let total = total.into();
        if total.is_negative() {
            return;
        }
        let out = self.samples(meta, Kind::Counter);
        write_sample(out, meta.name, "_total", labels, None, total);
        if let Some(at) = created.filter(|t| t.is_finite() && *t > 0.0) {
            write_sample(out, meta.name, "_created", labels, None, Value::Float(at));
        }
    }

    /// An info's sample (value 1).
    pub(crate) fn info(&mut self, meta: &'static Meta, labels: &Labels) {
        write_sample(self.samples(meta, Kind::Info), meta.name, "_info", labels, None, Value::Int(1));
    }

    /// A stateset's samples: one per state of `states`, 1 for `current`.
    pub(crate) fn stateset(&mut self, meta: &'static Meta, labels: &Labels, states: &[&str], current: &str) {
        let out = self.samples(meta, Kind::StateSet);
        for state in states {
            let on = Value::from(*state == current);
            write_sample(out, meta.name, "", labels, Some((meta.name, state)), on);
        }
    }

    /// The text: each family's metadata then its samples, `# EOF` last.
    pub(crate) fn finish(self) -> String {
        let mut out =
            String::with_capacity(self.families.iter().map(|(_, s)| s.len() + 200).sum::<usize>() + 6);
        for (meta, samples) in &self.families {
            let _ = writeln!(out, "# TYPE {} {}", meta.name, meta.kind.as_str());
            if let Some(unit) = meta.unit {
                let _ = writeln!(out, "# UNIT {} {unit}", meta.name);
            }
            let _ = writeln!(out, "# HELP {} {}", meta.name, meta.help);
            out.push_str(samples);
        }
        out.push_str("# EOF\n");
        out
    }
}

/// The media type of the text format, for an HTTP response's `Content-Type`.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    static G: Meta = Meta { name: "t_size_bytes", kind: Kind::Gauge, unit: Some("bytes"), help: "A size." };
    static C: Meta = Meta { name: "t_events", kind: Kind::Counter, unit: None, help: "Events." };
    static I: Meta = Meta { name: "t_thing", kind: Kind::Info, unit: None, help: "A thing." };
    static S: Meta = Meta { name: "t_state", kind: Kind::StateSet, unit: None, help: "A state." };

    #[test]
    fn families_are_grouped_and_end_with_eof() {
        let mut e = Exposition::default();
        e.gauge(&G, &[("s", "a")], 1u64);
        e.counter(&C, &[("s", "a")], 5i64, Some(1.5));
        e.gauge(&G, &[("s", "b")], -2i64);
        e.info(&I, &[("s", "a"), ("pid", "7")]);
        e.stateset(&S, &[("s", "a")], &["up", "down"], "down");
        e.counter(&C, &[("s", "b")], 0u64, None);
        let text = e.finish();
        assert_eq!(
            text,
            "# TYPE t_size_bytes gauge\n# UNIT t_size_bytes bytes\n# HELP t_size_bytes A size.\n\
             t_size_bytes{s=\"a\"} 1\nt_size_bytes{s=\"b\"} -2\n\
             # TYPE t_events counter\n# HELP t_events Events.\n\
             t_events_total{s=\"a\"} 5\nt_events_created{s=\"a\"} 1.5\nt_events_total{s=\"b\"} 0\n\
             # TYPE t_thing info\n# HELP t_thing A thing.\nt_thing_info{s=\"a\",pid=\"7\"} 1\n\
             # TYPE t_state stateset\n# HELP t_state A state.\n\
             t_state{s=\"a\",t_state=\"up\"} 0\nt_state{s=\"a\",t_state=\"down\"} 1\n# EOF\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut e = Exposition::default();
        e.gauge(&G, &[("s", "a\"b\\c\nd\te")], 0u64);
        e.gauge(&G, &[], 0u64);
        let text = e.finish();
        assert!(text.contains("t_size_bytes{s=\"a\\\"b\\\\c\\nd\te\"} 0\n"), "{text}");
        assert!(text.contains("\nt_size_bytes 0\n"), "{text}");
    }

    #[test]
    fn numbers_are_openmetrics_numbers_and_counters_never_negative() {
        let mut e = Exposition::default();
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.25, 1e21] {
            e.gauge(&G, &[], v);
        }
        e.gauge(&G, &[], i64::MIN);
        e.counter(&C, &[("s", "neg")], -1i64, Some(1.0));
        e.counter(&C, &[("s", "nan")], f64::NAN, None);
        e.counter(&C, &[("s", "big")], u64::MAX, Some(-3.0));
        let text = e.finish();
        let values: Vec<&str> =
            text.lines().filter(|l| l.starts_with("t_size_bytes ")).map(|l| &l[13..]).collect();
        assert_eq!(values, ["NaN", "+Inf", "-Inf", "0.25", "1000000000000000000000", "-9223372036854775808"]);
        assert!(!text.contains("neg") && !text.contains("nan"), "{text}");
        assert!(text.contains("t_events_total{s=\"big\"} 18446744073709551615\n"), "{text}");
        assert!(!text.contains("_created"), "a time before the epoch is left out: {text}");
    }

    #[test]
    fn naming_rules_are_checked() {
        assert!([&G, &C, &I, &S].iter().all(|m| m.naming_error().is_none()));
        let bad = [
            Meta { name: "x_total", kind: Kind::Counter, unit: None, help: "" },
            Meta { name: "x_info", kind: Kind::Info, unit: None, help: "" },
            Meta { name: "x_size", kind: Kind::Gauge, unit: Some("bytes"), help: "" },
            Meta { name: "x_bytes", kind: Kind::StateSet, unit: Some("bytes"), help: "" },
            Meta { name: "x-y", kind: Kind::Gauge, unit: None, help: "" },
            Meta { name: "x", kind: Kind::Gauge, unit: None, help: "a\nb" },
        ];
        for m in &bad {
            assert!(m.naming_error().is_some(), "{m:?}");
        }
    }
}
