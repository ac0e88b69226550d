//! Message-size distributions of a tenant: fixed, uniform over a range,
//! or a list of sizes with weights.

use rand_core::RngCore;
use serde::Deserialize;

/// How `size` is written: a number, `{ min, max }` or `{ values, weights }`.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "a size in bytes (size = 16), a uniform range (size = { min = 64, max = 4096 }) or a weighted list (size = { values = [16, 4096], weights = [3, 1] })"
)]
pub(super) enum SizeSpec {
    Fixed(u32),
    Uniform(UniformSpec),
    List(ListSpec),
    /// Anything else, kept to say what is wrong with it ([`explain`]).
    Other(toml::Value),
}

/// Why a `size` value is not a size (the value as written).
fn explain(v: &toml::Value) -> String {
    use toml::Value;
    let bytes = |what: &str, v: &Value| -> Option<String> {
        match v {
            Value::Integer(n) if *n < 0 => Some(format!("{what} = {n}: negative; a size is a number of bytes")),
            Value::Integer(0) => Some(format!("{what} = 0: zero; a message carries at least 1 byte")),
            Value::Integer(n) if *n > super::MAX_SIZE as i64 => {
                Some(format!("{what} = {n}: above 1 GiB ({} bytes)", super::MAX_SIZE))
            }
            Value::Integer(_) => None,
            Value::Float(f) => Some(format!("{what} = {f}: not an integer (a size is a whole number of bytes)")),
            Value::String(t) => {
                Some(format!("{what} = {t:?}: a string; write the number of bytes without quotes ({what} = 4096)"))
            }
            other => Some(format!("{what} = {other}: not a number of bytes")),
        }
    };
    if let Some(why) = bytes("size", v) {
        if !v.is_table() {
            return why;
        }
    }
    let Some(t) = v.as_table() else { return "not a size".into() };
    let known: &[&str] = if t.contains_key("values") { &["values", "weights"] } else { &["min", "max"] };
    if let Some(k) = t.keys().find(|k| !known.contains(&k.as_str())) {
        return format!("size: unknown key `{k}` (a range has `min` and `max`, a list `values` and `weights`)");
    }
    for key in known {
        match (t.get(*key), *key) {
            (None, "weights") => {}
            (None, _) => return format!("size: `{key}` is missing"),
            (Some(Value::Array(items)), "values" | "weights") => {
                for (i, item) in items.iter().enumerate() {
                    let why = match (*key, item) {
                        ("weights", Value::Integer(n)) if (0..=u32::MAX as i64).contains(n) => None,
                        ("weights", other) => {
                            Some(format!("size.weights[{i}] = {other}: a weight is a whole number >= 0"))
                        }
                        (_, item) => bytes(&format!("size.values[{i}]"), item),
                    };
                    if let Some(why) = why {
                        return why;
                    }
                }
            }
            (Some(other), "values" | "weights") => return format!("size.{key} = {other}: must be a list [..]"),
            (Some(item), _) => {
                if let Some(why) = bytes(&format!("size.{key}"), item) {
                    return why;
                }
            }
        }
    }
    "not a size: a size in bytes (size = 16), a uniform range (size = { min = 64, max = 4096 }) or a weighted list \
     (size = { values = [16, 4096], weights = [3, 1] })"
        .into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UniformSpec {
    min: u32,
    max: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListSpec {
    values: Vec<u32>,
    weights: Option<Vec<u32>>,
}

/// Message sizes of a tenant, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeDist {
    /// Every message has this size.
    Fixed(u32),
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest.
        min: u32,
        /// Largest.
        max: u32,
    },
    /// One of `values`, chosen with probability proportional to its weight.
    Weighted {
        /// The sizes.
        values: Vec<u32>,
        /// Running sums of the weights (the last is the total).
        cumulative: Vec<u64>,
    },
}

impl TryFrom<SizeSpec> for SizeDist {
    type Error = String;

    fn try_from(s: SizeSpec) -> Result<Self, String> {
        Ok(match s {
            SizeSpec::Other(v) => return Err(explain(&v)),
            SizeSpec::Fixed(0) => return Err("size = 0: zero; a message carries at least 1 byte".into()),
            SizeSpec::Fixed(n) => SizeDist::Fixed(n),
            SizeSpec::Uniform(UniformSpec { min, max }) => {
                if min == 0 || min > max {
                    return Err(format!("size: uniform range needs 1 <= min <= max (min = {min}, max = {max})"));
                }
                SizeDist::Uniform { min, max }
            }
            SizeSpec::List(ListSpec { values, weights }) => {
                let weights = weights.unwrap_or_else(|| vec![1; values.len()]);
                if values.is_empty() || weights.len() != values.len() {
                    return Err(format!(
                        "size: `values` must be non-empty and `weights` as long ({} values, {} weights)",
                        values.len(),
                        weights.len()
                    ));
                }
                if values.contains(&0) || weights.iter().all(|&w| w == 0) {
                    return Err("size: values must be at least 1 and some weight above 0".into());
                }
                let cumulative = weights
                    .iter()
                    .scan(0u64, |acc, &w| {
                        *acc += w as u64;
                        Some(*acc)
                    })
                    .collect();
                SizeDist::Weighted { values, cumulative }
            }
        })
    }
}

impl SizeDist {
    /// The largest size it can draw.
    pub fn max(&self) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { max, .. } => *max,
            SizeDist::Weighted { values, .. } => values.iter().copied().max().unwrap_or(1),
        }
    }

    /// Draws a size.
    pub fn sample(&self, rng: &mut impl RngCore) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { min, max } => min + (rng.next_u64() % (*max as u64 - *min as u64 + 1)) as u32,
            SizeDist::Weighted { values, cumulative } => {
                let total = cumulative.last().copied().unwrap_or(1).max(1);
                let x = rng.next_u64() % total;
                let i = cumulative.partition_point(|&c| c <= x);
                values[i.min(values.len() - 1)]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    #[test]
    fn weighted_draws_follow_the_weights() {
        let d = SizeDist::try_from(SizeSpec::List(ListSpec { values: vec![16, 4096], weights: Some(vec![3, 1]) }))
            .expect("valid list");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let n = 40_000;
        let small = (0..n).filter(|_| d.sample(&mut rng) == 16).count() as f64 / n as f64;
        assert!((small - 0.75).abs() < 0.02, "{small}");
        assert_eq!(d.max(), 4096);
    }

    #[test]
    fn uniform_stays_in_range() {
        let d = SizeDist::Uniform { min: 10, max: 12 };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let seen: std::collections::BTreeSet<u32> = (0..1000).map(|_| d.sample(&mut rng)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![10, 11, 12]);
    }
}
