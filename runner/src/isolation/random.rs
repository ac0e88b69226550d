//! Random cells for `perf-runner matrix --random N`: mixes drawn from the
//! whole space of tenant shapes, not from a list, so that a policy is
//! judged on traffic nobody tuned it for.
//!
//! Each cell has one victim (traffic class 1, as in the fixed grid) and one
//! to three attackers, each drawn independently:
//!
//! - **operation**: WRITE (half), SEND or READ (a quarter each);
//! - **victim kind**: a ping-pong (`lat`, 8 B to 64 KiB), a closed-loop
//!   stream (`bw`) or an open-loop Poisson sender (`open`, offering 2% to
//!   20% of the link, at most 1 M messages/s);
//! - **sizes**: log-uniform over 8 B to 1 MiB (victims) or 2 MiB
//!   (attackers), half of them rounded to a power of two, the others any
//!   byte count (so sizes just under or over any threshold come up); an
//!   attacker draws a mix of four sizes one time in six;
//! - **QPs, depth and post lists**: log-uniform, 1 to 16 QPs for a
//!   victim and 1 to 256 for an attacker, 1 to 32 (victim) or 16
//!   (attacker) messages outstanding per QP, and post lists of 1 half of
//!   the time, else up to the depth (at most 32); an attacker's bytes
//!   outstanding are held to 64 MiB by lowering its depth, then its QPs;
//! - **weights**: 1 for everyone in three cells of four, else 2 or 3 for
//!   the victim or for one attacker.
//!
//! A cell's tenants are named after their whole shapes
//! (`V:bw-send-4k-3q-d8-pl2`, `A:write-mixed16bx3.4kx1.64kx5-2q-d4`: sizes
//! and their weights), since the matrix runs a tenant alone once per name,
//! and the same seed gives the same cells: a failing cell is reproduced by
//! its seed and index, or by its scenario (`--verbose` prints its tenants).

use perf_dataplane::traffic::TestOp;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::cells::{shape, spec, Cell, Shape};
use crate::scenario::{Kind, Scenario, SizeDist};

/// Most bytes an attacker keeps outstanding (QPs x depth x largest size).
const MAX_OUTSTANDING: u64 = 64 << 20;

/// `n` random cells drawn from `mix_seed` (the runs themselves use `seed`),
/// each run for `duration_ms` with `warmup_ms` of warm-up on `profile`.
pub fn random_cells(profile: &str, duration_ms: f64, warmup_ms: f64, seed: u64, mix_seed: u64, n: usize) -> Vec<Cell> {
    let mut d = Draw(ChaCha8Rng::seed_from_u64(mix_seed));
    (0..n)
        .map(|i| {
            let victim = d.victim();
            let attackers: Vec<Shape> = (0..d.pick(&[2, 1, 1]) + 1).map(|_| d.attacker()).collect();
            // Weights: one tenant in four cells gets 2 or 3.
            let mut weights = vec![1u32; attackers.len() + 1];
            if d.unit() < 0.25 {
                let who = d.below(weights.len() as u64) as usize;
                weights[who] = 2 + d.below(2) as u32;
            }
            let mut tenants = vec![spec("V", &victim, 1, weights[0])];
            for (k, (a, &w)) in attackers.iter().zip(&weights[1..]).enumerate() {
                tenants.push(spec(["A", "B", "C"][k], a, 0, w));
            }
            let weight = |w: u32| if w == 1 { String::new() } else { format!(" w{w}") };
            let atk: Vec<String> =
                attackers.iter().zip(&weights[1..]).map(|(a, &w)| format!("{}{}", a.name, weight(w))).collect();
            Cell {
                name: format!("#{i} {}{} vs {}", victim.name, weight(weights[0]), atk.join("+")),
                scenario: Scenario { profile: profile.to_string(), duration_ms, warmup_ms, seed, tenants },
            }
        })
        .collect()
}

/// The draws of one mix.
struct Draw(ChaCha8Rng);

impl Draw {
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }

    /// An index drawn with probability proportional to `weights`.
    fn pick(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut x = self.below(total as u64) as u32;
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }

    /// Log-uniform over `lo..=hi` (`1 <= lo <= hi`).
    fn log_uniform(&mut self, lo: u32, hi: u32) -> u32 {
        let (l, h) = ((lo as f64).ln(), (hi as f64 + 1.0).ln());
        ((l + self.unit() * (h - l)).exp() as u32).clamp(lo, hi)
    }

    /// A message size in `lo..=hi`: half of the time a power of two.
    fn size(&mut self, lo: u32, hi: u32) -> u32 {
        let s = self.log_uniform(lo, hi);
        if self.unit() < 0.5 {
            (1u32 << (31 - s.leading_zeros())).max(lo)
        } else {
            s
        }
    }

    fn op(&mut self) -> TestOp {
        [TestOp::Write, TestOp::Send, TestOp::Read][self.pick(&[2, 1, 1])]
    }

    /// A post list: 1 half of the time, else up to `depth` (at most 32).
    fn post_list(&mut self, depth: u32) -> u32 {
        if depth == 1 || self.unit() < 0.5 {
            1
        } else {
            2 + self.below(depth.min(32) as u64 - 1) as u32
        }
    }

    fn victim(&mut self) -> Shape {
        let op = self.op();
        match self.pick(&[7, 10, 3]) {
            0 => {
                let size = self.size(8, 64 << 10);
                shape(&format!("lat-{}-{}", op_name(op), size_name(size)), Kind::Lat, op, size, 1, 1, 1)
            }
            1 => {
                let size = self.size(8, 1 << 20);
                let qps = self.log_uniform(1, 16);
                let depth = self.log_uniform(1, 32);
                let post_list = self.post_list(depth);
                let name = stream_name("bw-", op, &size_name(size), qps, depth, post_list);
                shape(&name, Kind::Bw, op, size, qps, depth, post_list)
            }
            _ => {
                let size = self.size(8, 16 << 10);
                let qps = self.log_uniform(1, 4);
                // 2% to 20% of a 100 Gb/s link, payload and headers.
                let share = 0.02 + 0.18 * self.unit();
                let rate = (share * 12.5e9 / (size as f64 + 86.0)).min(1e6).round().max(1.0);
                let name = format!("open-{}-{}-{}q-r{}k", op_name(op), size_name(size), qps, (rate / 1e3).round());
                Shape { rate_per_s: Some(rate), ..shape(&name, Kind::Open, op, size, qps, 16, 1) }
            }
        }
    }

    fn attacker(&mut self) -> Shape {
        let op = self.op();
        let (sizes, label) = if self.unit() < 1.0 / 6.0 {
            let mut values: Vec<u32> = (0..4).map(|_| self.size(8, 2 << 20)).collect();
            values.sort_unstable();
            values.dedup();
            let mut cumulative = Vec::with_capacity(values.len());
            // The weights are in the name: a tenant's name is its whole
            // shape (the matrix shares alone runs by name).
            let mut parts = Vec::with_capacity(values.len());
            let mut sum = 0u64;
            for &v in &values {
                let w = 1 + self.below(8);
                sum += w;
                cumulative.push(sum);
                parts.push(format!("{}x{w}", size_name(v)));
            }
            let label = format!("mixed{}", parts.join("."));
            (SizeDist::Weighted { values, cumulative }, label)
        } else {
            let size = self.size(8, 2 << 20);
            (SizeDist::Fixed(size), size_name(size))
        };
        let mut qps = self.log_uniform(1, 256);
        let mut depth = self.log_uniform(1, 16);
        let largest = sizes.max() as u64;
        while depth > 1 && qps as u64 * depth as u64 * largest > MAX_OUTSTANDING {
            depth /= 2;
        }
        while qps > 1 && qps as u64 * depth as u64 * largest > MAX_OUTSTANDING {
            qps /= 2;
        }
        let post_list = self.post_list(depth);
        let name = stream_name("", op, &label, qps, depth, post_list);
        Shape { sizes, ..shape(&name, Kind::Bw, op, largest as u32, qps, depth, post_list) }
    }
}

fn op_name(op: TestOp) -> &'static str {
    match op {
        TestOp::Write => "write",
        TestOp::Send => "send",
        TestOp::Read => "read",
    }
}

/// `16`, `1000b`, `4k`, `1m`: the fixed grid's way of writing sizes.
fn size_name(size: u32) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{}m", size >> 20)
    } else if size >= 1 << 10 && size.is_multiple_of(1 << 10) {
        format!("{}k", size >> 10)
    } else {
        format!("{size}b")
    }
}

fn stream_name(prefix: &str, op: TestOp, size: &str, qps: u32, depth: u32, post_list: u32) -> String {
    let pl = if post_list > 1 { format!("-pl{post_list}") } else { String::new() };
    format!("{prefix}{}-{size}-{qps}q-d{depth}{pl}", op_name(op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_cells_are_valid_scenarios_and_the_same_for_the_same_seed() {
        for mix_seed in 1..=5 {
            let cells = random_cells("cx6-100g", 22.0, 2.0, 1, mix_seed, 60);
            assert_eq!(cells.len(), 60);
            let again = random_cells("cx6-100g", 22.0, 2.0, 1, mix_seed, 60);
            for (c, a) in cells.iter().zip(&again) {
                assert_eq!(c.name, a.name);
                c.scenario.check().unwrap_or_else(|e| panic!("seed {mix_seed}, cell {}: {e}", c.name));
                let n = c.scenario.tenants.len();
                assert!((2..=4).contains(&n), "{}: {n} tenants", c.name);
                assert_eq!(c.scenario.tenants[0].tc, 1, "{}: the victim is in class 1", c.name);
                for t in &c.scenario.tenants[1..] {
                    let outstanding = t.qps as u64 * t.depth as u64 * t.sizes.max() as u64;
                    assert!(outstanding <= MAX_OUTSTANDING || t.depth == 1 && t.qps == 1, "{}", t.name);
                }
            }
        }
        // A name is a whole shape: the matrix runs each name alone once.
        let mut shapes = std::collections::HashMap::new();
        for mix_seed in 1..=20 {
            for c in random_cells("cx6-100g", 22.0, 2.0, 1, mix_seed, 50) {
                for t in &c.scenario.tenants {
                    let shape =
                        format!("{:?}", (t.kind, t.op, &t.sizes, t.qps, t.depth, t.post_list, t.rate_per_s, t.tc));
                    let seen = shapes.entry(t.name.clone()).or_insert_with(|| shape.clone());
                    assert_eq!(*seen, shape, "two shapes named {}", t.name);
                }
            }
        }
        // Different seeds, different mixes.
        let a = random_cells("cx6-100g", 22.0, 2.0, 1, 1, 10);
        let b = random_cells("cx6-100g", 22.0, 2.0, 1, 2, 10);
        assert!(a.iter().zip(&b).any(|(x, y)| x.name != y.name));
    }

    #[test]
    fn the_draws_cover_the_shape_space() {
        let cells = random_cells("cx6-100g", 22.0, 2.0, 1, 7, 400);
        let tenants: Vec<_> = cells.iter().flat_map(|c| &c.scenario.tenants).collect();
        for kind in [Kind::Lat, Kind::Bw, Kind::Open] {
            assert!(tenants.iter().any(|t| t.kind == kind), "no {kind:?} tenant");
        }
        for op in [TestOp::Write, TestOp::Send, TestOp::Read] {
            assert!(tenants.iter().any(|t| t.op == op), "no {op:?} tenant");
        }
        assert!(tenants.iter().any(|t| matches!(t.sizes, SizeDist::Weighted { .. })));
        assert!(tenants.iter().any(|t| t.sizes.max() < 64) && tenants.iter().any(|t| t.sizes.max() >= 1 << 20));
        assert!(tenants.iter().any(|t| t.qps >= 128) && tenants.iter().any(|t| t.post_list >= 8));
        assert!(tenants.iter().any(|t| t.weight > 1));
        assert!(cells.iter().any(|c| c.scenario.tenants.len() == 4));
        // Not only powers of two: sizes just off a threshold come up.
        assert!(tenants.iter().any(|t| !t.sizes.max().is_power_of_two()));
    }
}
