//! A very small JSON writer: enough for `stat --json` and `clean --json`, no extra dependency.

use std::fmt::Write;

/// `s` as a JSON string literal, quoted and escaped.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finite number, or `null` (JSON has no NaN or infinity).
pub fn float(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".to_owned()
    }
}

/// `Some(value)` as its JSON text, `None` as `null`.
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

/// A JSON array of already-encoded values.
pub fn array(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    format!("[{}]", items.join(","))
}

/// Builds a JSON object field by field.
#[derive(Debug, Default)]
pub struct Object {
    buf: String,
}

impl Object {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a field whose value is already JSON text (a number, `true`, an object, ...).
    pub fn raw(mut self, key: &str, value: impl ToString) -> Self {
        if !self.buf.is_empty() {
            self.buf.push(',');
        }
        self.buf.push_str(&string(key));
        self.buf.push(':');
        self.buf.push_str(&value.to_string());
        self
    }

    /// Adds a string field.
    pub fn str(self, key: &str, value: &str) -> Self {
        self.raw(key, string(value))
    }

    pub fn finish(self) -> String {
        format!("{{{}}}", self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_builds() {
        assert_eq!(string("a\"b\\c\n\u{1}é"), r#""a\"b\\c\n\u0001é""#);
        let o = Object::new().str("n", "x").raw("v", 3).raw("f", float(f64::NAN)).raw("o", opt(None::<i64>));
        assert_eq!(o.finish(), r#"{"n":"x","v":3,"f":null,"o":null}"#);
        assert_eq!(array(["1".to_owned(), "2".to_owned()]), "[1,2]");
        assert_eq!(array(Vec::new()), "[]");
        assert_eq!(float(0.5), "0.5");
    }
}
