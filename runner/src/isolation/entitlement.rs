//! The isolation contract: what each tenant of a scenario is entitled to.
//!
//! A tenant's entitlement is its weighted max-min fair share of the NIC's
//! bottlenecks, or its demand (its figure alone) where that is smaller.
//! The bottlenecks and their per-message costs come from the RNIC profile:
//!
//! - the requester's wire (host 0's egress): every packet's payload plus
//!   headers, preamble and gap, and the RETH of WRITE and READ requests;
//! - the responder's wire (host 1's egress): READ responses, and the
//!   replies of a ping-pong;
//! - WQE processing, the NIC-wide send scheduler: `sched_wqe_ps` per WQE
//!   (per turn of a message larger than `turn_max_bytes`);
//! - the dataplane loop's core, when its work is charged to the clock
//!   (`--loop-cost`, `docs/loop-cost.md`): a message posted whole costs it
//!   one WQE, one completion, one policy call (a native policy's) and its
//!   share of a CQE: small messages of a post list share one
//!   ([`GROUP_BYTES`]), the others have one each; a ping-pong's message
//!   also pays the arrival step (or round) that takes it in. With a free
//!   loop this bottleneck costs nothing and never fills, so the
//!   entitlements are those of the three NIC bottlenecks alone.
//!
//! Shares are computed by progressive filling on each tenant's dominant
//! share (its largest fraction of any bottleneck), growing in proportion
//! to its weight: a tenant stops growing at its demand or when a
//! bottleneck it uses is full (weighted dominant-resource fairness, which
//! is weighted max-min fairness where one bottleneck binds). See
//! `docs/isolation.md`.

use perf_dataplane::engine::{LoopCost, GROUP_BYTES};
use perf_dataplane::rnic::sim::RnicProfile;
use perf_dataplane::traffic::TestOp;
use serde::Serialize;

use crate::scenario::{Kind, SizeDist, TenantSpec};

/// The bottlenecks, in the order of [`Costs::per_msg`]: the NIC's three
/// ([`NIC_BOTTLENECKS`] of them), then the dataplane loop's core.
pub const BOTTLENECKS: [&str; 4] = ["wire", "responder wire", "wqe processing", "loop"];

/// How many of [`BOTTLENECKS`] are the NIC's (the loop's is last).
pub const NIC_BOTTLENECKS: usize = 3;

/// AETH of a READ response packet, bytes (IBTA).
const AETH_BYTES: u64 = 4;

/// What one message of a tenant costs on each bottleneck, as a fraction of
/// a second of that bottleneck (so `rate x cost` is its utilization).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Costs {
    /// Per bottleneck of [`BOTTLENECKS`].
    pub per_msg: [f64; 4],
    /// Mean payload bytes per message.
    pub mean_bytes: f64,
}

impl Costs {
    /// The costs of `spec`'s messages on `profile`'s NIC and on a
    /// dataplane loop that costs `loop_cost` ([`LoopCost::ZERO`]: free).
    pub fn of(profile: &RnicProfile, spec: &TenantSpec, loop_cost: &LoopCost) -> Costs {
        let sizes = support(&spec.sizes);
        let total_w: f64 = sizes.iter().map(|&(_, w)| w).sum::<f64>().max(f64::MIN_POSITIVE);
        let mut per_msg = [0.0; 4];
        let loop_ps = (loop_cost.wqe_ps + loop_cost.completion_ps + loop_cost.native.call_ps) as f64;
        let mut mean_bytes = 0.0;
        let frame = (profile.header_bytes + profile.preamble_ifg_bytes) as u64;
        let sec = |frame_bytes: u64| profile.wire_ps(frame_bytes) as f64 / 1e12;
        for &(len, w) in &sizes {
            let len = len as u64;
            let pkts = len.div_ceil(profile.mtu as u64).max(1);
            let data_frames = len + pkts * frame;
            let reth = profile.reth_bytes as u64;
            let (req, resp) = match spec.op {
                TestOp::Write => (data_frames + reth, 0),
                TestOp::Send => (data_frames, 0),
                TestOp::Read => (frame + reth, data_frames + AETH_BYTES),
            };
            // A ping-pong's peer answers with the same operation and size.
            let resp = if spec.kind == Kind::Lat && spec.op != TestOp::Read { req } else { resp };
            let turns = len.div_ceil(profile.turn_max_bytes as u64).max(1);
            let wqe = if spec.op == TestOp::Read { 1 } else { turns };
            let f = w / total_w;
            per_msg[0] += f * sec(req);
            per_msg[1] += f * sec(resp);
            per_msg[2] += f * (wqe * profile.sched_wqe_ps) as f64 / 1e12;
            // Messages per CQE: a list's small messages up to GROUP_BYTES
            // of them (a ping-pong's lone message has its own).
            // A ping-pong's lone request is taken in by a round or an
            // arrival step of its own, whose fixed cost it pays.
            let (list, lone_ps) = match spec.kind {
                Kind::Lat => (1, loop_cost.step_ps as f64),
                _ => (spec.post_list.max(1) as u64, 0.0),
            };
            let per_cqe = list.min(GROUP_BYTES.div_ceil(len.max(1))).max(1);
            let msg_ps = loop_ps + lone_ps + loop_cost.cqe_ps as f64 / per_cqe as f64;
            per_msg[NIC_BOTTLENECKS] += f * msg_ps / 1e12;
            mean_bytes += f * len as f64;
        }
        Costs { per_msg, mean_bytes }
    }

    /// The largest cost (the bottleneck this tenant uses most per message).
    pub fn dominant(&self) -> f64 {
        self.per_msg.iter().copied().fold(0.0, f64::max)
    }
}

/// The sizes of a distribution with their probabilities (a uniform range
/// is taken at 64 evenly spaced points).
fn support(d: &SizeDist) -> Vec<(u32, f64)> {
    match d {
        SizeDist::Fixed(n) => vec![(*n, 1.0)],
        SizeDist::Uniform { min, max } => {
            let n = 64u64.min((*max - *min) as u64 + 1);
            (0..n).map(|k| ((*min as u64 + k * (*max - *min) as u64 / (n - 1).max(1)) as u32, 1.0)).collect()
        }
        SizeDist::Weighted { values, cumulative } => {
            let mut prev = 0;
            values
                .iter()
                .zip(cumulative)
                .map(|(&v, &c)| {
                    let w = (c - prev) as f64;
                    prev = c;
                    (v, w)
                })
                .collect()
        }
    }
}

/// One tenant as the contract sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claim {
    /// Its costs per message.
    pub costs: Costs,
    /// Its demand: messages per second alone.
    pub demand_per_s: f64,
    /// Its weight.
    pub weight: f64,
}

/// What a tenant is entitled to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entitlement {
    /// Messages per second, millions.
    pub mpps: f64,
    /// Payload goodput, Gb/s.
    pub gbps: f64,
    /// Its demand alone, millions of messages per second.
    pub demand_mpps: f64,
    /// What bounds it: `demand`, or the bottleneck that filled.
    pub bound_by: String,
    /// Its demand uses at most half of its weighted share of every
    /// bottleneck: a sparse tenant, judged by latency.
    pub sparse: bool,
}

/// Weighted dominant-resource progressive filling of `claims` (see the
/// module comment). Returns one entitlement per claim, in order.
pub fn water_fill(claims: &[Claim]) -> Vec<Entitlement> {
    let n = claims.len();
    let mut rate = vec![0.0f64; n];
    let mut bound: Vec<Option<String>> = vec![None; n];
    let mut used = [0.0f64; BOTTLENECKS.len()];
    // Rounds: each freezes at least one tenant.
    for _ in 0..=n {
        let live: Vec<usize> = (0..n).filter(|&t| bound[t].is_none()).collect();
        if live.is_empty() {
            break;
        }
        // Growth of each live tenant's rate per unit of level: w / dominant.
        let slope = |t: usize| {
            let d = claims[t].costs.dominant();
            if d > 0.0 {
                claims[t].weight / d
            } else {
                f64::INFINITY
            }
        };
        // The level at which the next event happens, above the current
        // rates: a tenant reaching its demand, or a bottleneck filling.
        let mut step = f64::INFINITY;
        for &t in &live {
            let s = slope(t);
            if s.is_finite() {
                step = step.min((claims[t].demand_per_s - rate[t]).max(0.0) / s);
            } else {
                step = 0.0;
            }
        }
        let mut fills = [f64::INFINITY; BOTTLENECKS.len()];
        for (r, fill) in fills.iter_mut().enumerate() {
            let growth: f64 = live.iter().map(|&t| slope(t) * claims[t].costs.per_msg[r]).sum();
            if growth > 0.0 && growth.is_finite() {
                *fill = ((1.0 - used[r]).max(0.0)) / growth;
            }
        }
        let fill_step = fills.iter().copied().fold(f64::INFINITY, f64::min);
        let step = step.min(fill_step);
        if !step.is_finite() {
            break;
        }
        for &t in &live {
            let s = slope(t);
            let add = if s.is_finite() { s * step } else { claims[t].demand_per_s };
            let add = add.min((claims[t].demand_per_s - rate[t]).max(0.0));
            rate[t] += add;
            for (r, u) in used.iter_mut().enumerate() {
                *u += add * claims[t].costs.per_msg[r];
            }
        }
        for &t in &live {
            if rate[t] >= claims[t].demand_per_s * (1.0 - 1e-9) {
                bound[t] = Some("demand".into());
            }
        }
        for (r, name) in BOTTLENECKS.iter().enumerate() {
            if used[r] >= 1.0 - 1e-9 {
                for &t in &live {
                    if bound[t].is_none() && claims[t].costs.per_msg[r] > 0.0 {
                        bound[t] = Some((*name).into());
                    }
                }
            }
        }
    }
    let total_w: f64 = claims.iter().map(|c| c.weight).sum::<f64>().max(f64::MIN_POSITIVE);
    (0..n)
        .map(|t| {
            let c = &claims[t];
            let share = c.weight / total_w;
            Entitlement {
                mpps: rate[t] / 1e6,
                gbps: rate[t] * c.costs.mean_bytes * 8.0 / 1e9,
                demand_mpps: c.demand_per_s / 1e6,
                bound_by: bound[t].clone().unwrap_or_else(|| "demand".into()),
                sparse: c.demand_per_s * c.costs.dominant() <= 0.5 * share,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(wire: f64, wqe: f64, demand: f64, weight: f64) -> Claim {
        Claim { costs: Costs { per_msg: [wire, 0.0, wqe, 0.0], mean_bytes: 1000.0 }, demand_per_s: demand, weight }
    }

    #[test]
    fn two_wire_bound_tenants_split_the_wire_by_weight() {
        // Each message takes 1 us of wire: 1 M msg/s fills it.
        let e = water_fill(&[claim(1e-6, 1e-8, 5e6, 1.0), claim(1e-6, 1e-8, 5e6, 3.0)]);
        assert!((e[0].mpps - 0.25).abs() < 1e-9, "{e:?}");
        assert!((e[1].mpps - 0.75).abs() < 1e-9, "{e:?}");
        assert_eq!(e[0].bound_by, "wire");
    }

    #[test]
    fn a_small_demand_is_met_and_the_rest_goes_to_the_others() {
        let e = water_fill(&[claim(1e-6, 1e-8, 0.1e6, 1.0), claim(1e-6, 1e-8, 5e6, 1.0)]);
        assert!((e[0].mpps - 0.1).abs() < 1e-9, "{e:?}");
        assert_eq!(e[0].bound_by, "demand");
        assert!(e[0].sparse);
        assert!((e[1].mpps - 0.9).abs() < 1e-9, "{e:?}");
        assert!(!e[1].sparse);
    }

    #[test]
    fn tenants_on_different_bottlenecks_share_by_dominant_share() {
        // A is wire-bound, B is WQE-bound: each gets half of its own bottleneck.
        let e = water_fill(&[claim(1e-6, 1e-9, 1e9, 1.0), claim(1e-9, 1e-8, 1e9, 1.0)]);
        assert!((e[0].mpps * 1e6 * 1e-6 + e[1].mpps * 1e6 * 1e-9 - 1.0).abs() < 1e-6, "{e:?}");
        let dom = |i: usize, c: f64| e[i].mpps * 1e6 * c;
        assert!((dom(0, 1e-6) - dom(1, 1e-8)).abs() < 1e-6, "{e:?}");
    }

    #[test]
    fn costs_count_headers_and_responder_wire_for_read() {
        let p = RnicProfile::cx6_100g();
        let mut w = TenantSpec::new("w", Kind::Bw, TestOp::Write, 1 << 20);
        let c = Costs::of(&p, &w, &LoopCost::ZERO);
        // 1 MiB in 256 packets: 1,070,608 frame bytes at 100 Gb/s.
        assert!((c.per_msg[0] - 85.64864e-6).abs() < 1e-9, "{c:?}");
        assert_eq!(c.per_msg[1], 0.0);
        w.op = TestOp::Read;
        let r = Costs::of(&p, &w, &LoopCost::ZERO);
        assert!(r.per_msg[1] > r.per_msg[0] * 100.0, "{r:?}");
        assert_eq!(r.per_msg[3], 0.0, "a free loop is no bottleneck");
    }

    #[test]
    fn a_charged_loop_is_a_bottleneck_two_message_rate_tenants_share() {
        let p = RnicProfile::cx6_100g();
        let m = TenantSpec::new("m", Kind::Bw, TestOp::Write, 16);
        let c = Costs::of(&p, &m, &LoopCost::MEASURED);
        let l = LoopCost::MEASURED;
        // Posted one at a time: a CQE of its own per message.
        let one = (l.wqe_ps + l.completion_ps + l.cqe_ps + l.native.call_ps) as f64 / 1e12;
        assert!((c.per_msg[3] - one).abs() < 1e-18, "{c:?}");
        // In lists of 32, the list's 16 B messages share one.
        let listed = Costs::of(&p, &TenantSpec { post_list: 32, ..m.clone() }, &l);
        let share = (l.wqe_ps + l.completion_ps + l.native.call_ps) as f64 + l.cqe_ps as f64 / 32.0;
        assert!((listed.per_msg[3] - share / 1e12).abs() < 1e-18, "{listed:?}");
        // Each alone posts what the loop allows; together they halve it.
        let alone = 1.0 / one;
        let e = water_fill(&[
            Claim { costs: c, demand_per_s: alone, weight: 1.0 },
            Claim { costs: c, demand_per_s: alone, weight: 1.0 },
        ]);
        assert!((e[0].mpps * 1e6 - alone / 2.0).abs() < 1.0, "{e:?}");
        assert_eq!(e[0].bound_by, "loop");
        let free = Costs::of(&p, &m, &LoopCost::ZERO);
        assert_eq!(free.per_msg[..3], c.per_msg[..3], "the NIC's costs do not depend on the loop");
    }
}
