//! The contract applied to one run: each tenant's entitlement from the
//! scenario and the tenants' figures alone, and its verdict (the rules of
//! `docs/isolation.md`), attached to the run's tenant reports so that
//! `run --alone`, `compare` and `matrix` judge alike.

use std::collections::HashMap;

use perf_dataplane::engine::LoopCost;
use perf_dataplane::rnic::sim::RnicProfile;
use serde::Serialize;

use super::entitlement::{water_fill, Claim, Costs, Entitlement};
use crate::report::TenantReport;
use crate::scenario::{Kind, TenantSpec};

/// Throughput a tenant must reach, as a fraction of its entitlement.
pub const THROUGHPUT_FLOOR: f64 = 0.85;
/// p99 latency a latency-bound tenant may reach, as a multiple of alone.
pub const LATENCY_CEILING: f64 = 1.5;

/// A tenant's part of the contract in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Its entitlement.
    pub entitled: Entitlement,
    /// Achieved / entitled, in messages (1 if entitled to nothing).
    pub ratio: f64,
    /// Judged by latency: a ping-pong, or a sparse open-loop tenant.
    pub latency_bound: bool,
    /// p99 latency over its p99 alone (0 if not measured).
    pub p99_over_alone: f64,
    /// Within its entitlement.
    pub pass: bool,
}

/// Judges one tenant: `kind` and entitlement `e`, its figures `got` and
/// alone `solo`.
pub fn judge(kind: Kind, e: &Entitlement, got: Option<&TenantReport>, solo: Option<&TenantReport>) -> Verdict {
    let mpps = got.map_or(0.0, |t| t.mpps);
    let p99 = got.filter(|t| t.completed > 0).map_or(f64::INFINITY, |t| t.latency_us.p99);
    let alone_p99 = solo.map_or(0.0, |t| t.latency_us.p99);
    let latency_bound = kind == Kind::Lat || (kind == Kind::Open && e.sparse);
    let ratio = if e.mpps > 0.0 { mpps / e.mpps } else { 1.0 };
    let p99_over_alone = if alone_p99 > 0.0 { p99 / alone_p99 } else { 0.0 };
    let pass = if latency_bound { p99 <= LATENCY_CEILING * alone_p99 } else { ratio >= THROUGHPUT_FLOOR };
    Verdict { entitled: e.clone(), ratio, latency_bound, p99_over_alone, pass }
}

/// The entitlements of `specs` on `profile` with a loop that costs
/// `loop_cost`, with each tenant's demand from `alone` (by tenant name; a
/// tenant not found demands nothing).
pub fn entitlements(
    profile: &RnicProfile,
    loop_cost: &LoopCost,
    specs: &[TenantSpec],
    alone: &HashMap<String, TenantReport>,
) -> Vec<Entitlement> {
    let claims: Vec<Claim> = specs
        .iter()
        .map(|t| Claim {
            costs: Costs::of(profile, t, loop_cost),
            demand_per_s: alone.get(&t.name).map_or(0.0, |r| r.mpps * 1e6),
            weight: t.weight as f64,
        })
        .collect();
    water_fill(&claims)
}

/// Attaches a verdict to every tenant of `tenants` (in `specs` order),
/// whose demands are the members of `alone`, run with a loop that costs
/// `loop_cost`.
pub fn annotate(
    profile: &RnicProfile,
    loop_cost: &LoopCost,
    specs: &[TenantSpec],
    tenants: &mut [TenantReport],
    alone: &HashMap<String, TenantReport>,
) {
    let ent = entitlements(profile, loop_cost, specs, alone);
    for ((spec, e), t) in specs.iter().zip(&ent).zip(tenants.iter_mut()) {
        let v = judge(spec.kind, e, Some(t), alone.get(&spec.name));
        t.contract = Some(v);
    }
}

/// The demands of a scenario's tenants from its groups' alone runs: each
/// member of a group demands what the group's first member did alone.
pub fn alone_by_tenant(
    specs: &[TenantSpec],
    group_alone: &HashMap<String, TenantReport>,
) -> HashMap<String, TenantReport> {
    specs.iter().filter_map(|s| group_alone.get(&s.group).map(|a| (s.name.clone(), a.clone()))).collect()
}
