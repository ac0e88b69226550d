//! Scenario files: the TOML that describes a run (profile, durations,
//! seed, tenants with their traffic, phases and message sizes). The format
//! is documented key by key in `docs/scenarios.md`. Unknown keys are
//! errors; every error names the file, line, column and key.

mod error;
mod size;

use std::path::Path;

use perf_dataplane::rnic::sim::RnicProfile;
use perf_dataplane::traffic::TestOp;
use serde::Deserialize;

pub use error::ScenarioError;
pub use size::SizeDist;

/// The largest message, bytes (1 GiB): of a tenant, and of `-s`.
pub const MAX_SIZE: u32 = 1 << 30;
/// The most copies of one `[[tenant]]` entry.
pub const MAX_COUNT: u32 = 10_000;
/// The longest tenant name, characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The shortest measurement window (`duration_ms - warmup_ms`), ms.
pub const MIN_WINDOW_MS: f64 = 0.1;
/// The largest scenario file, bytes (the biggest in the repository is a
/// few KB; this keeps `run /dev/zero` from reading forever).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A whole scenario, with tenants that have `count > 1` expanded.
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
    /// Random seed of the simulator and of the tenants' generators.
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
    /// Closed loop: keep `depth` messages outstanding per QP (like `ib_write_bw`).
    Bw,
    /// One message at a time, ping-pong (like `ib_write_lat`).
    Lat,
    /// Open loop: messages arrive as a Poisson process at `rate_per_s`,
    /// whatever the NIC does; at most `depth` are outstanding per QP and
    /// the rest wait in the application (their wait counts in latency).
    Open,
}

/// One tenant (one entry of `[[tenant]]`, or one copy of it when `count > 1`).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawTenant")]
pub struct TenantSpec {
    /// Name in reports (`NAME#i` for copies of a `count > 1` entry).
    pub name: String,
    /// The `[[tenant]]` entry's name: reports aggregate a group's copies.
    pub group: String,
    /// Traffic kind.
    pub kind: Kind,
    /// Operation.
    pub op: TestOp,
    /// The largest message size in bytes (the size, when fixed).
    pub size: u32,
    /// Message sizes.
    pub sizes: SizeDist,
    /// Number of QPs.
    pub qps: u32,
    /// Outstanding messages per QP (bw, open).
    pub depth: u32,
    /// Requests per post (bw).
    pub post_list: u32,
    /// Hardware traffic class of its QPs.
    pub tc: u8,
    /// Weight for weighted policies.
    pub weight: u32,
    /// The tenant starts posting at this time, ms.
    pub start_ms: f64,
    /// The tenant posts nothing from this time on, ms (`None`: until the end).
    pub stop_ms: Option<f64>,
    /// Arrival rate of an `open` tenant, messages per second.
    pub rate_per_s: Option<f64>,
    /// Copies of this entry (expanded on load).
    pub count: u32,
}

/// A `[[tenant]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    name: String,
    kind: Kind,
    #[serde(default = "default_op")]
    op: TestOp,
    size: size::SizeSpec,
    #[serde(default = "one")]
    qps: u32,
    #[serde(default = "default_depth")]
    depth: u32,
    #[serde(default = "one")]
    post_list: u32,
    #[serde(default)]
    tc: u8,
    #[serde(default = "one")]
    weight: u32,
    #[serde(default)]
    start_ms: f64,
    stop_ms: Option<f64>,
    rate_per_s: Option<f64>,
    #[serde(default = "one")]
    count: u32,
}

impl TryFrom<RawTenant> for TenantSpec {
    type Error = String;

    fn try_from(r: RawTenant) -> Result<Self, String> {
        let sizes = SizeDist::try_from(r.size).map_err(|e| format!("tenant {:?}: {e}", r.name))?;
        Ok(TenantSpec {
            group: r.name.clone(),
            name: r.name,
            kind: r.kind,
            op: r.op,
            size: sizes.max(),
            sizes,
            qps: r.qps,
            depth: r.depth,
            post_list: r.post_list,
            tc: r.tc,
            weight: r.weight,
            start_ms: r.start_ms,
            stop_ms: r.stop_ms,
            rate_per_s: r.rate_per_s,
            count: r.count,
        })
    }
}

/// The top-level keys, in the order of `docs/scenarios.md`.
pub const TOP_KEYS: &[&str] = &["profile", "duration_ms", "warmup_ms", "seed", "tenant"];
/// The keys of a `[[tenant]]` table, in the order of `docs/scenarios.md`.
pub const TENANT_KEYS: &[&str] = &[
    "name",
    "kind",
    "op",
    "size",
    "qps",
    "depth",
    "post_list",
    "tc",
    "weight",
    "start_ms",
    "stop_ms",
    "rate_per_s",
    "count",
];

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

/// A tenant spec built in code (the microbenchmarks' victim).
impl TenantSpec {
    /// A tenant of `kind` and `op` with fixed `size`, all else default.
    pub fn new(name: &str, kind: Kind, op: TestOp, size: u32) -> Self {
        TenantSpec {
            name: name.to_string(),
            group: name.to_string(),
            kind,
            op,
            size,
            sizes: SizeDist::Fixed(size),
            qps: 1,
            depth: default_depth(),
            post_list: 1,
            tc: 0,
            weight: 1,
            start_ms: 0.0,
            stop_ms: None,
            rate_per_s: None,
            count: 1,
        }
    }

    /// When this tenant posts, in ns: `[start, stop)` clipped to the run.
    pub fn active_ns(&self, duration_ms: f64) -> (u64, u64) {
        let stop = self.stop_ms.unwrap_or(duration_ms).min(duration_ms);
        ((self.start_ms * 1e6) as u64, (stop * 1e6) as u64)
    }
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        use std::io::Read;
        let read = |e: std::io::Error| anyhow::anyhow!("reading scenario {}: {e}", path.display());
        let file = std::fs::File::open(path).map_err(read)?;
        // One byte past the cap tells a file at the cap from a longer one.
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(read)?;
        anyhow::ensure!(
            bytes.len() as u64 <= MAX_FILE_BYTES,
            "reading scenario {}: longer than {MAX_FILE_BYTES} bytes; a scenario file is a few KB of TOML",
            path.display()
        );
        let text = String::from_utf8(bytes)
            .map_err(|e| anyhow::anyhow!("reading scenario {}: not UTF-8 text ({e})", path.display()))?;
        Ok(Self::parse_named(&path.display().to_string(), &text)?)
    }

    /// Parses and validates scenario text (errors name `<input>`).
    #[cfg(test)]
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        Self::parse_named("<input>", text)
    }

    /// Validates a scenario built in code (as `parse_named` validates one
    /// read from text): what is wrong, with the tenant and key.
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        self.validate().map_err(|(tenant, key, message)| format!("tenant {tenant:?}, key {key}: {message}"))
    }

    /// Parses and validates scenario text read from `file`.
    pub fn parse_named(file: &str, text: &str) -> Result<Self, ScenarioError> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| error::from_toml(file, text, &e))?;
        s.validate().map_err(|(tenant, key, message)| {
            let (line, column) = error::locate(text, tenant, key);
            ScenarioError { file: file.to_string(), line, column, key: key.to_string(), message, suggestion: None }
        })?;
        s.expand();
        Ok(s)
    }

    /// Checks values; an error names the tenant index (None: top level),
    /// the key and what is wrong.
    fn validate(&self) -> Result<(), (Option<usize>, &'static str, String)> {
        let top = |key, m: &str| Err((None, key, m.to_string()));
        if self.tenants.is_empty() {
            return top("tenant", "a scenario needs at least one [[tenant]]");
        }
        if !(self.warmup_ms >= 0.0 && self.warmup_ms.is_finite()) {
            return top("warmup_ms", "must be a number >= 0");
        }
        if !(self.duration_ms > self.warmup_ms && self.duration_ms <= 3.6e6) {
            return top("duration_ms", "must exceed `warmup_ms` (and be at most an hour)");
        }
        if self.duration_ms - self.warmup_ms < MIN_WINDOW_MS {
            return top(
                "duration_ms",
                &format!(
                    "the measurement window (`duration_ms` - `warmup_ms` = {} ms) is shorter than {MIN_WINDOW_MS} ms: \
                     too short for a rate to mean anything",
                    self.duration_ms - self.warmup_ms
                ),
            );
        }
        if RnicProfile::by_name(&self.profile).is_none() {
            return top(
                "profile",
                &format!("unknown RNIC profile {:?} (known: {})", self.profile, RnicProfile::NAMES.join(", ")),
            );
        }
        // Every name a tenant will have in reports and file names, with
        // the entry it comes from: `count` copies are `NAME#1` ...
        let mut names: Vec<(String, usize)> = Vec::new();
        for (i, t) in self.tenants.iter().enumerate() {
            if t.count == 1 {
                names.push((t.name.clone(), i));
            } else {
                names.extend((1..=t.count.min(MAX_COUNT)).map(|k| (format!("{}#{k}", t.name), i)));
            }
        }
        let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        let mut files: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for (name, i) in &names {
            let t = &self.tenants[*i];
            let bad = |m: String| Err((Some(*i), "name", format!("tenant {:?}: {m}", t.name)));
            if let Some(other) = seen.insert(name.clone(), &self.tenants[*i].name) {
                return bad(if other == t.name && t.count == 1 {
                    "another tenant has this name (reports tell tenants apart by name)".into()
                } else {
                    format!("its name {name:?} is also a name of tenant {other:?} (`count` names copies NAME#1, NAME#2, ...)")
                });
            }
            if let Some(other) = files.insert(crate::plot::slug(name), &self.tenants[*i].name) {
                return bad(format!(
                    "{name:?} and a name of tenant {other:?} differ only in characters that file names \
                     (plots, logs) replace by `_`: their files would overwrite each other"
                ));
            }
        }
        for (i, t) in self.tenants.iter().enumerate() {
            let bad = |key, m: String| Err((Some(i), key, format!("tenant {:?}: {m}", t.name)));
            if t.name.trim().is_empty() {
                return bad("name", "a tenant needs a name that is not empty or blank".into());
            }
            if let Some(c) = t.name.chars().find(|c| c.is_control()) {
                return bad(
                    "name",
                    format!("control character {c:?} in the name (reports and file names must stay readable)"),
                );
            }
            if t.name.chars().count() > MAX_NAME_CHARS {
                return bad("name", format!("longer than {MAX_NAME_CHARS} characters"));
            }
            if t.weight < 1 {
                return bad(
                    "weight",
                    "must be at least 1 (weights are relative shares; 0 would never be served)".into(),
                );
            }
            if !(1..=4096).contains(&t.qps) {
                return bad("qps", "must be 1 to 4096".into());
            }
            if t.size > MAX_SIZE {
                return bad("size", format!("{} bytes: above 1 GiB ({MAX_SIZE} bytes)", t.size));
            }
            if !(1..=4096).contains(&t.depth) {
                return bad("depth", "must be 1 to 4096".into());
            }
            if t.post_list < 1 || t.post_list > t.depth {
                return bad("post_list", "must be 1 to `depth`".into());
            }
            if t.tc > 7 {
                return bad("tc", "must be 0 to 7".into());
            }
            if !(1..=MAX_COUNT).contains(&t.count) {
                return bad("count", format!("must be 1 to {MAX_COUNT}"));
            }
            if !(t.start_ms >= 0.0 && t.start_ms < self.duration_ms) {
                return bad("start_ms", format!("must be 0 or more and before `duration_ms` ({})", self.duration_ms));
            }
            if let Some(stop) = t.stop_ms {
                if !(stop > t.start_ms && stop.is_finite()) {
                    return bad("stop_ms", "must be after `start_ms`".into());
                }
            }
            match (t.kind, t.rate_per_s) {
                (Kind::Open, None) => return bad("rate_per_s", "an open tenant needs an arrival rate".into()),
                (Kind::Open, Some(r)) if !(r > 0.0 && r <= 1e9) => {
                    return bad("rate_per_s", "must be above 0 and at most 1e9 messages/s".into())
                }
                (Kind::Bw | Kind::Lat, Some(_)) => {
                    return bad("rate_per_s", "only an open tenant has an arrival rate (kind = \"open\")".into())
                }
                _ => {}
            }
            if t.kind == Kind::Lat {
                if t.qps != 1 {
                    return bad("qps", "a lat tenant has exactly one QP".into());
                }
                if !matches!(t.sizes, SizeDist::Fixed(_)) {
                    return bad("size", "a lat tenant (ping-pong) has one fixed message size".into());
                }
            }
            if t.kind == Kind::Open && t.post_list != 1 {
                return bad("post_list", "an open tenant posts each message as it arrives (post_list = 1)".into());
            }
        }
        Ok(())
    }

    /// Replaces each `count > 1` entry by its copies `NAME#1` ... `NAME#count`.
    fn expand(&mut self) {
        let mut out = Vec::with_capacity(self.tenants.iter().map(|t| t.count as usize).sum());
        for t in self.tenants.drain(..) {
            if t.count == 1 {
                out.push(t);
                continue;
            }
            for k in 1..=t.count {
                out.push(TenantSpec { name: format!("{}#{k}", t.name), count: 1, ..t.clone() });
            }
        }
        self.tenants = out;
    }

    /// The same scenario with only tenant `i` (for "alone" figures).
    pub fn alone(&self, i: usize) -> Scenario {
        Scenario { tenants: vec![self.tenants[i].clone()], ..self.clone() }
    }

    /// The tenant groups (`[[tenant]]` entries) in order, each with the
    /// index of its first tenant.
    pub fn groups(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for (i, t) in self.tenants.iter().enumerate() {
            if !out.iter().any(|(g, _)| *g == t.group) {
                out.push((t.group.clone(), i));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
