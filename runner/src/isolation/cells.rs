//! The victim x attacker grid of `perf-runner matrix`, after Husky's test
//! matrix (NSDI '23: victims and attackers across WRITE, SEND and READ,
//! bandwidth, processing-unit and many-QP attackers) plus the mixes that
//! broke isolation before: sizes just under a policy's split threshold,
//! multi-QP message-rate victims, mixed-size attackers, open-loop victims
//! and cells with more than two tenants. Names are stable: a tenant keeps
//! its name (and so its seeded draws) in every cell it appears in.

use perf_dataplane::traffic::TestOp;

use crate::scenario::{Kind, Scenario, SizeDist, TenantSpec};

/// One cell: a scenario whose tenants are all judged by the contract.
#[derive(Debug, Clone)]
pub struct Cell {
    /// `VICTIM vs ATTACKER[+ATTACKER]`.
    pub name: String,
    /// The scenario the cell runs.
    pub scenario: Scenario,
}

/// A tenant's traffic in a cell, before its role (victim or attacker),
/// traffic class and weight are given.
pub(super) struct Shape {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) op: TestOp,
    pub(super) sizes: SizeDist,
    pub(super) qps: u32,
    pub(super) depth: u32,
    pub(super) post_list: u32,
    pub(super) rate_per_s: Option<f64>,
}

/// A shape of one fixed message size and no arrival rate.
pub(super) fn shape(name: &str, kind: Kind, op: TestOp, size: u32, qps: u32, depth: u32, pl: u32) -> Shape {
    Shape {
        name: name.to_string(),
        kind,
        op,
        sizes: SizeDist::Fixed(size),
        qps,
        depth,
        post_list: pl,
        rate_per_s: None,
    }
}

fn victims() -> Vec<Shape> {
    use Kind::*;
    use TestOp::*;
    vec![
        shape("lat-write-16", Lat, Write, 16, 1, 1, 1),
        shape("lat-send-16", Lat, Send, 16, 1, 1, 1),
        shape("lat-read-16", Lat, Read, 16, 1, 1, 1),
        shape("bw-write-64k", Bw, Write, 65536, 1, 16, 4),
        shape("mr-write-8b-8q", Bw, Write, 8, 8, 128, 32),
        shape("mr-write-16b-pl32", Bw, Write, 16, 1, 128, 32),
        shape("bw-send-4k-4q", Bw, Send, 4096, 4, 32, 1),
        shape("mr-send-16b-pl32", Bw, Send, 16, 1, 128, 32),
        shape("bw-read-64k", Bw, Read, 65536, 1, 16, 1),
        Shape { rate_per_s: Some(200_000.0), ..shape("open-write-512", Open, Write, 512, 1, 16, 1) },
    ]
}

fn attackers() -> Vec<Shape> {
    use Kind::*;
    use TestOp::*;
    vec![
        shape("write-1m-1q", Bw, Write, 1 << 20, 1, 4, 1),
        shape("write-1m-16q", Bw, Write, 1 << 20, 16, 1, 1),
        shape("send-1m-16q", Bw, Send, 1 << 20, 16, 1, 1),
        shape("send-64k-16q", Bw, Send, 65536, 16, 4, 1),
        shape("send-8k-32q-pl8", Bw, Send, 8192, 32, 16, 8),
        shape("read-1m-16q", Bw, Read, 1 << 20, 16, 1, 1),
        shape("write-4k-16q-pl8", Bw, Write, 4096, 16, 32, 8),
        shape("write-1000b-32q", Bw, Write, 1000, 32, 16, 4),
        shape("write-8b-64q-pl32", Bw, Write, 8, 64, 64, 32),
        Shape {
            sizes: SizeDist::Weighted { values: vec![16, 4096, 65536, 1 << 20], cumulative: vec![8, 12, 14, 15] },
            ..shape("write-mixed-16b-1m-4q", Bw, Write, 1 << 20, 4, 8, 1)
        },
        shape("write-4k-512q", Bw, Write, 4096, 512, 2, 1),
    ]
}

/// Tenant `role:NAME` of shape `s` in traffic class `tc` with `weight`.
pub(super) fn spec(role: &str, s: &Shape, tc: u8, weight: u32) -> TenantSpec {
    let mut t = TenantSpec::new(&format!("{role}:{}", s.name), s.kind, s.op, s.sizes.max());
    t.sizes = s.sizes.clone();
    t.qps = s.qps;
    t.depth = s.depth;
    t.post_list = s.post_list;
    t.rate_per_s = s.rate_per_s;
    t.tc = tc;
    t.weight = weight;
    t
}

/// The cells, each run for `duration_ms` with `warmup_ms` of warm-up on
/// `profile`. `quick` keeps a subset that runs in CI (every victim and
/// every attacker at least once).
pub fn cells(profile: &str, duration_ms: f64, warmup_ms: f64, seed: u64, quick: bool) -> Vec<Cell> {
    let scenario =
        |tenants: Vec<TenantSpec>| Scenario { profile: profile.to_string(), duration_ms, warmup_ms, seed, tenants };
    let (vs, atk) = (victims(), attackers());
    let mut out = Vec::new();
    for (i, v) in vs.iter().enumerate() {
        for (j, a) in atk.iter().enumerate() {
            // The quick subset: a diagonal walk that meets every victim and attacker.
            if quick && (j % vs.len() != i) && ((j + 4) % vs.len() != i) {
                continue;
            }
            // The sensitive tenant in class 1, for the hardware baselines.
            out.push(Cell {
                name: format!("{} vs {}", v.name, a.name),
                scenario: scenario(vec![spec("V", v, 1, 1), spec("A", a, 0, 1)]),
            });
        }
    }
    // More than two tenants.
    let three =
        [("lat-write-16", "write-1m-16q", "write-8b-64q-pl32"), ("mr-write-8b-8q", "write-1m-16q", "read-1m-16q")];
    for (v, a, b) in three {
        let find = |list: &[Shape], n: &str| list.iter().position(|s| s.name == n);
        let (Some(v), Some(a), Some(b)) = (find(&vs, v), find(&atk, a), find(&atk, b)) else { continue };
        out.push(Cell {
            name: format!("{} vs {}+{}", vs[v].name, atk[a].name, atk[b].name),
            scenario: scenario(vec![spec("V", &vs[v], 1, 1), spec("A", &atk[a], 0, 1), spec("B", &atk[b], 0, 1)]),
        });
    }
    // Weights: a 3:1 split between two bulk tenants of different shapes.
    if let (Some(a), Some(b)) =
        (atk.iter().find(|s| s.name == "write-1m-16q"), vs.iter().find(|s| s.name == "bw-write-64k"))
    {
        out.push(Cell {
            name: format!("{} w1 vs {} w3", b.name, a.name),
            scenario: scenario(vec![spec("V", b, 1, 1), spec("A", a, 0, 3)]),
        });
        out.push(Cell {
            name: format!("{} w3 vs {} w1", b.name, a.name),
            scenario: scenario(vec![spec("V", b, 1, 3), spec("A", a, 0, 1)]),
        });
    }
    out
}
