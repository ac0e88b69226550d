//! Scenario files: the TOML that describes a run (profile, durations,
//! seed, tenants). Unknown keys are errors; parse errors name the file,
//! line, column and key.

use std::path::Path;

use anyhow::Context;
use perf_dataplane::perftest::TestOp;
use serde::Deserialize;

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// RNIC profile name.
    #[serde(default = "default_profile")]
    pub profile: String,
    /// Total virtual time, ms.
    #[serde(default = "default_duration")]
    pub duration_ms: f64,
    /// Measurement starts after this, ms.
    #[serde(default = "default_warmup")]
    pub warmup_ms: f64,
    /// Random seed of the simulator.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The tenants.
    #[serde(rename = "tenant")]
    pub tenants: Vec<TenantSpec>,
}

/// How a tenant generates traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Keep `depth` messages outstanding per QP (like `ib_write_bw`).
    Bw,
    /// One message at a time, ping-pong (like `ib_write_lat`).
    Lat,
}

/// One tenant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Name in reports.
    pub name: String,
    /// Traffic kind.
    pub kind: Kind,
    /// Operation.
    #[serde(default = "default_op")]
    pub op: TestOp,
    /// Message size in bytes.
    pub size: u32,
    /// Number of QPs.
    #[serde(default = "one")]
    pub qps: u32,
    /// Outstanding messages per QP (bw).
    #[serde(default = "default_depth")]
    pub depth: u32,
    /// Requests per post (bw).
    #[serde(default = "one")]
    pub post_list: u32,
    /// Hardware traffic class of its QPs.
    #[serde(default)]
    pub tc: u8,
    /// Weight for weighted policies.
    #[serde(default = "one")]
    pub weight: u32,
}

fn default_profile() -> String {
    "cx6-100g".into()
}
fn default_duration() -> f64 {
    30.0
}
fn default_warmup() -> f64 {
    5.0
}
fn default_seed() -> u64 {
    1
}
fn default_op() -> TestOp {
    TestOp::Write
}
fn default_depth() -> u32 {
    128
}
fn one() -> u32 {
    1
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading scenario {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in scenario {}", path.display()))
    }

    /// Parses and validates scenario text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let s: Scenario = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.tenants.is_empty(), "key `tenant`: a scenario needs at least one [[tenant]]");
        anyhow::ensure!(self.duration_ms > self.warmup_ms, "key `duration_ms` must exceed `warmup_ms`");
        anyhow::ensure!(self.warmup_ms >= 0.0, "key `warmup_ms` must not be negative");
        for (i, t) in self.tenants.iter().enumerate() {
            let at = || format!("tenant {} ({:?})", i + 1, t.name);
            anyhow::ensure!(t.qps >= 1 && t.qps <= 4096, "{}: key `qps` must be 1 to 4096", at());
            anyhow::ensure!(t.size >= 1, "{}: key `size` must be at least 1", at());
            anyhow::ensure!(t.depth >= 1 && t.depth <= 4096, "{}: key `depth` must be 1 to 4096", at());
            anyhow::ensure!(
                t.post_list >= 1 && t.post_list <= t.depth,
                "{}: key `post_list` must be 1 to `depth`",
                at()
            );
            anyhow::ensure!(t.tc <= 7, "{}: key `tc` must be 0 to 7", at());
            anyhow::ensure!(
                !(t.kind == Kind::Lat && t.qps != 1),
                "{}: key `qps`: a lat tenant has exactly one QP",
                at()
            );
        }
        Ok(())
    }

    /// The same scenario with only tenant `i` (for "alone" figures).
    pub fn alone(&self, i: usize) -> Scenario {
        Scenario { tenants: vec![self.tenants[i].clone()], ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let e = Scenario::parse("[[tenant]]\nname='a'\nkind='bw'\nsize=1\nszie=2\n").unwrap_err().to_string();
        assert!(e.contains("szie"), "{e}");
        assert!(e.contains("line 5"), "{e}");
    }

    #[test]
    fn defaults_fill_in() {
        let s = Scenario::parse("[[tenant]]\nname='a'\nkind='lat'\nsize=16\n").unwrap();
        assert_eq!(s.profile, "cx6-100g");
        assert_eq!(s.tenants[0].qps, 1);
        assert_eq!(s.tenants[0].op, TestOp::Write);
    }

    #[test]
    fn bad_values_name_tenant_and_key() {
        let e = Scenario::parse("[[tenant]]\nname='a'\nkind='lat'\nsize=16\nqps=2\n").unwrap_err().to_string();
        assert!(e.contains("`qps`") && e.contains("\"a\""), "{e}");
    }
}
