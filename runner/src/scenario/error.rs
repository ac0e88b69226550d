//! Where a scenario went wrong: every error names the file, line, column
//! and key, and for an unknown key suggests the closest valid one.

use std::fmt;

/// A scenario error with its place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// File name (or `<input>`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The key the error is about (`tenant` for a whole table).
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// The closest valid key, for an unknown key.
    pub suggestion: Option<String>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: key `{}`: {}", self.file, self.line, self.column, self.key, self.message)?;
        if let Some(s) = &self.suggestion {
            write!(f, " (did you mean `{s}`?)")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The closest of `candidates` to `word`, if close enough to be a likely typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The words in backticks of `s` (`a`, `b`: a, b).
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// The key named on the line of byte `offset`: what stands before `=`,
/// or the table name of a `[table]` / `[[table]]` header.
fn key_on_line(text: &str, offset: usize) -> Option<String> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[start..end].trim();
    let key = match line.find('=') {
        Some(i) if !line.starts_with('[') => &line[..i],
        _ => line.trim_start_matches('[').split(']').next().unwrap_or(""),
    };
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'').trim();
    (!key.is_empty()).then(|| key.to_string())
}

/// Turns a TOML (or serde) error into a [`ScenarioError`].
pub fn from_toml(file: &str, text: &str, e: &toml::de::Error) -> ScenarioError {
    let msg = e.message().trim().to_string();
    let offset = e.span().map_or(0, |s| s.start);
    let (line, column) = line_col(text, offset);
    let mut key = None;
    let mut suggestion = None;
    for (marker, unknown) in [("unknown field `", true), ("missing field `", false)] {
        if let Some(i) = msg.find(marker) {
            let rest = &msg[i + marker.len()..];
            let name = rest.split('`').next().unwrap_or("");
            key = Some(name.to_string());
            if unknown {
                let mut expected = rest.split_once("expected").map_or(Vec::new(), |(_, e)| backticked(e));
                if expected.is_empty() {
                    expected = super::TOP_KEYS.iter().chain(super::TENANT_KEYS).copied().collect();
                }
                suggestion = closest(name, expected).map(str::to_string);
            }
        }
    }
    let mut key = key.or_else(|| key_on_line(text, offset)).unwrap_or_else(|| "(document)".into());
    let (mut line, mut column) = (line, column);
    // A bad `size` is reported on its table: point at the `size` line.
    if key == "tenant" && msg.contains(": size") {
        if let Some(at) = key_in_table(text, offset, "size") {
            (line, column) = line_col(text, at);
            key = "size".into();
        }
    }
    ScenarioError { file: file.to_string(), line, column, key, message: msg, suggestion }
}

/// The offset of the line that sets `key` in the table whose header is at
/// or before `offset` (up to the next table header).
fn key_in_table(text: &str, offset: usize, key: &str) -> Option<usize> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let mut at = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let mut first = true;
    for raw in text[at..].split_inclusive('\n') {
        let line = raw.trim_start();
        if line.starts_with('[') && !first {
            return None;
        }
        first = false;
        if let Some(rest) = line.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                return Some(at + raw.len() - line.len());
            }
        }
        at += raw.len();
    }
    None
}

/// Finds where `key` is set: in the `tenant`-th `[[tenant]]` table (0-based)
/// or at top level (`None`). Falls back to the table's header, then to the
/// start of the file, when the key is not written (a default).
pub fn locate(text: &str, tenant: Option<usize>, key: &str) -> (usize, usize) {
    let mut table: Option<usize> = None;
    let mut seen = 0usize;
    let mut header = None;
    let mut offset = 0usize;
    for raw in text.split_inclusive('\n') {
        let line = raw.trim_start();
        let indent = raw.len() - line.len();
        if line.starts_with('[') {
            table = if line.starts_with("[[tenant]]") || line.starts_with("[[ tenant ]]") {
                seen += 1;
                Some(seen - 1)
            } else {
                Some(usize::MAX)
            };
            if table.is_some() && table == tenant {
                header = Some(offset + indent);
            }
        } else if table == tenant {
            if let Some(rest) = line.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return line_col(text, offset + indent);
                }
            }
        }
        offset += raw.len();
    }
    line_col(text, header.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn closest_suggests_typos_only() {
        assert_eq!(closest("szie", ["size", "seed"]), Some("size"));
        assert_eq!(closest("qqqqqqq", ["size", "seed"]), None);
    }

    #[test]
    fn locate_finds_the_key_of_the_right_tenant() {
        let t = "seed = 1\n[[tenant]]\nqps = 1\n[[tenant]]\nname = 'b'\n  qps = 2\n";
        assert_eq!(locate(t, Some(1), "qps"), (6, 3));
        assert_eq!(locate(t, Some(1), "depth"), (4, 1));
        assert_eq!(locate(t, None, "seed"), (1, 1));
    }
}
