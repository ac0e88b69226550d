//! The isolation contract through the binary: `matrix`'s CI subset judges
//! the flagship `fairshare` against passthrough and PeRF, `compare`
//! carries entitlements and verdicts in its JSON, and bad matrix input is
//! refused with a clear message. Virtual time and seeded: the figures are
//! the same on every machine.

use std::path::PathBuf;

use crate::common::{bin, read_json as json};
use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch("isolation", name)
}

fn passed(m: &Value, config: &str) -> (u64, u64, u64) {
    let s = m["summary"].as_array().expect("summary").iter().find(|s| s["config"] == config).expect("config row");
    (
        s["passed"].as_u64().expect("passed"),
        s["cells"].as_u64().expect("cells"),
        s["not_work_conserving"].as_u64().expect("wc"),
    )
}

/// The CI subset of the matrix: every victim and attacker at least once.
/// `fairshare` passes at least 95% of it, more cells than PeRF and than no
/// isolation, and keeps
/// the NIC as busy as passthrough (within 5%) in every backlogged cell;
/// every tenant of every row carries its entitlement.
#[test]
fn the_flagship_beats_perf_and_passthrough_on_the_ci_matrix() {
    let dir = scratch("quick");
    let out = dir.join("m.json");
    let svg = dir.join("m.svg");
    let o = bin()
        .args(["matrix", "--quick", "--policies", "passthrough,perf,fairshare", "--hw", "none", "--json"])
        .arg(&out)
        .arg("--svg")
        .arg(&svg)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = json(&out);
    let (fair, cells, fair_not_wc) = passed(&m, "fairshare");
    let (perf, _, _) = passed(&m, "perf");
    let (none, _, _) = passed(&m, "passthrough");
    assert!(cells >= 18, "{cells} cells");
    assert!(fair > perf && fair > none, "fairshare {fair}, perf {perf}, passthrough {none} of {cells}");
    // The contract's bar (issue 15): at least 95% of the cells (25 of the
    // 26 measured, docs/isolation.md).
    assert!(fair * 100 >= cells * 95, "fairshare passed {fair} of {cells}");
    assert!(fair_not_wc == 0, "fairshare left the NIC idle in {fair_not_wc} backlogged cells");
    for c in m["cells"].as_array().expect("cells") {
        for r in c["rows"].as_array().expect("rows") {
            for t in r["tenants"].as_array().expect("tenants") {
                let e = &t["verdict"]["entitled"];
                assert!(e["mpps"].as_f64().expect("entitled mpps") >= 0.0, "{t}");
                assert!(e["demand_mpps"].as_f64().expect("demand") >= e["mpps"].as_f64().expect("mpps") - 1e-9, "{t}");
            }
            for u in r["utilization"].as_array().expect("utilization") {
                let u = u.as_f64().expect("number");
                assert!((0.0..=1.0).contains(&u), "utilization {u} in {}", c["cell"]);
            }
        }
    }
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.matches("<rect").count() as u64 >= 3 * cells, "heatmap cells");
}

/// `compare` with alone rows judges every configuration: experiment 1's
/// ping-pong is latency-bound and `fairshare` keeps it within 1.5x of
/// alone while the stream keeps at least 0.85 of its entitlement.
#[test]
fn compare_carries_entitlements_and_verdicts() {
    let dir = scratch("compare");
    let out = dir.join("c.json");
    let o = bin()
        .args(["compare", "runner/scenarios/paper/exp1.toml", "--policies", "fairshare", "--json"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("entitled") && text.contains("PASS"), "{text}");
    let doc = json(&out);
    let run = doc["runs"].as_array().expect("runs").iter().find(|r| r["config"] == "fairshare").expect("fairshare row");
    let by_name =
        |n: &str| run["tenants"].as_array().expect("tenants").iter().find(|t| t["name"] == n).expect("tenant").clone();
    let d = by_name("D_single");
    assert_eq!(d["contract"]["latency_bound"], true, "{d}");
    assert_eq!(d["contract"]["pass"], true, "{d}");
    let b = by_name("B_single");
    assert_eq!(b["contract"]["entitled"]["bound_by"], "wire", "{b}");
    assert!(b["contract"]["ratio"].as_f64().expect("ratio") >= 0.85, "{b}");
}

/// Bad matrix input names what is wrong.
#[test]
fn bad_matrix_input_is_refused_clearly() {
    let err = |args: &[&str]| {
        let o = bin().args(args).output().expect("runs");
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    assert!(err(&["matrix", "--filter", "no such cell"]).contains("no cell matches"));
    assert!(err(&["matrix", "--quick", "--require", "fairshare=1.5"]).contains("fraction must be 0 to 1"));
    assert!(err(&["matrix", "--quick", "--policies", "nosuch"]).contains("nosuch"));
    assert!(err(&["matrix", "--profile", "cx9-800g"]).contains("unknown RNIC profile"));
    assert!(err(&["matrix", "--random", "0"]).contains("--random"));
    assert!(err(&["matrix", "--random", "3", "--quick"]).contains("cannot be used with"));
    assert!(err(&["matrix", "--mix-seed", "3"]).contains("--random"));
}

/// `matrix --random N` judges N drawn mixes, each with a victim and one to
/// three attackers whose every tenant carries its entitlement and verdict;
/// the same `--mix-seed` draws the same cells and gives the same figures,
/// another seed other cells.
#[test]
fn random_mixes_are_judged_and_reproduced_by_their_seed() {
    let dir = scratch("random");
    let run = |mix_seed: &str, name: &str| {
        let out = dir.join(name);
        let o = bin()
            .args(["matrix", "--random", "2", "--mix-seed", mix_seed, "--policies", "fairshare", "--hw", "none"])
            .args(["--duration-ms", "7", "--warmup-ms", "1", "--json"])
            .arg(&out)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        json(&out)
    };
    let a = run("11", "a.json");
    let cells = a["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2);
    for (i, c) in cells.iter().enumerate() {
        let name = c["cell"].as_str().expect("name");
        assert!(name.starts_with(&format!("#{i} ")) && name.contains(" vs "), "{name}");
        for r in c["rows"].as_array().expect("rows") {
            let tenants = r["tenants"].as_array().expect("tenants");
            assert!((2..=4).contains(&tenants.len()), "{name}");
            assert!(tenants[0]["name"].as_str().expect("name").starts_with("V:"), "{name}");
            for t in tenants {
                assert!(t["verdict"]["entitled"]["mpps"].as_f64().expect("entitled") >= 0.0, "{t}");
                assert!(t["verdict"]["pass"].is_boolean(), "{t}");
            }
        }
    }
    assert_eq!(a, run("11", "b.json"), "the same seed gave other figures");
    let other = run("12", "c.json");
    let names = |m: &Value| m["cells"].as_array().expect("cells").iter().map(|c| c["cell"].clone()).collect::<Vec<_>>();
    assert_ne!(names(&a), names(&other));
}

/// Twenty bulk tenants, each draining and refilling in turn, beside a READ
/// ping-pong (a held-out probe): past fair admission's shared budget a
/// tenant posts only within its reservation, so what queues in the NIC
/// ahead of the ping-pong stays near the budget whatever the tenant count
/// (each draining tenant used to put a chunk past it: p99 x6.4 of alone).
#[test]
fn many_bulk_tenants_stay_within_the_budget_beside_a_ping_pong() {
    let doc = compare_probe("lat-read-16_vs_20x-write-256k-2q", "many");
    let victim = |config: &str| row_tenants(&doc, config).into_iter().find(|t| t["name"] == "V").expect("V");
    let p99 = |t: &Value| t["contract"]["p99_over_alone"].as_f64().expect("p99 over alone");
    let (none, fair) = (victim("passthrough"), victim("fairshare"));
    assert!(p99(&none) > 20.0, "no isolation: {none}");
    assert!(p99(&fair) < 2.0, "fairshare: {fair}");
    for t in row_tenants(&doc, "fairshare").iter().filter(|t| t["name"] != "V") {
        assert!(t["contract"]["ratio"].as_f64().expect("ratio") >= 0.85, "{t}");
    }
}

/// `compare` of the held-out probe `probe` under passthrough and
/// `fairshare` with a free loop: its JSON.
fn compare_probe(probe: &str, dir: &str) -> Value {
    let out = scratch(dir).join("c.json");
    let o = bin()
        .args(["compare", &format!("runner/scenarios/probes/{probe}.toml")])
        .args(["--policies", "passthrough,fairshare", "--loop-cost", "zero", "--json"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    json(&out)
}

/// The tenants of `config`'s row of a `compare` JSON.
fn row_tenants(doc: &Value, config: &str) -> Vec<Value> {
    let run = doc["runs"].as_array().expect("runs").iter().find(|r| r["config"] == config).expect("row");
    run["tenants"].as_array().expect("tenants").clone()
}

/// A 32 B SEND message-rate tenant beside a READ stream and a WRITE stream
/// (a held-out probe): fair admission runs a deficit round robin per
/// direction, and charges each WQE its dominant NIC cost, so the READ
/// tenant's full budget does not set the WRITE direction's rotation, and
/// a small message is not charged a scheduler turn on top of its headers
/// (it read 0.62 of its entitlement with both).
#[test]
fn a_message_rate_tenant_gets_its_share_beside_a_read_and_a_write_stream() {
    every_tenant_gets_its_share("mr-send-32b-16q-pl16_vs_read-1m-16q+write-1m-16q", "mr-rw");
}

/// Checks that in the held-out probe `probe` the victim `V` gets under half
/// its entitlement with passthrough and every tenant at least 0.85 of its
/// own under `fairshare`.
fn every_tenant_gets_its_share(probe: &str, dir: &str) {
    let doc = compare_probe(probe, dir);
    let ratio = |t: &Value| t["contract"]["ratio"].as_f64().expect("ratio");
    let none = row_tenants(&doc, "passthrough").into_iter().find(|t| t["name"] == "V").expect("V");
    assert!(ratio(&none) < 0.5, "no isolation: {none}");
    for t in row_tenants(&doc, "fairshare") {
        assert!(ratio(&t) >= 0.85, "fairshare: {t}");
    }
}

/// A READ stream beside 64 QPs of 8 B WRITEs (a matrix cell): with at most
/// 9 of a tenant's QPs in the NIC (the fewest that saturate its
/// scheduler), the READ requests wait for 9 turns at the requester, not
/// 64, and the stream keeps its throughput (0.77 of it without the cap).
#[test]
fn a_read_stream_keeps_its_throughput_beside_many_qps_of_small_writes() {
    fairshare_passes_cell("bw-read-64k vs write-8b-64q-pl32", "zero", "read-mr");
}

/// Runs the matrix cells whose name contains `filter` under `fairshare`
/// with the loop cost `loop_cost`, and checks that it passes the one cell,
/// work-conserving.
fn fairshare_passes_cell(filter: &str, loop_cost: &str, dir: &str) {
    let out = scratch(dir).join("m.json");
    let o = bin()
        .args(["matrix", "--policies", "fairshare", "--hw", "none", "--loop-cost", loop_cost, "--filter", filter])
        .arg("--json")
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = json(&out);
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{}", String::from_utf8_lossy(&o.stdout));
}

/// A WRITE ping-pong beside a 16-QP SEND stream with the loop's measured
/// cost charged (a matrix cell): a charged round polls before it posts,
/// so fair admission's budget covers one of the loop's rounds, not two,
/// and the round it no longer adds does not queue in the NIC ahead of the
/// ping-pong (it read x1.5 of its p99 alone).
#[test]
fn a_ping_pong_beside_a_stream_keeps_its_latency_with_the_loop_charged() {
    fairshare_passes_cell("lat-write-16 vs send-1m-16q", "measured", "charged");
}

/// A READ ping-pong beside 64 QPs of 8 B WRITEs in post lists of 32, the
/// loop charged (a matrix cell): the attacker keeps the loop busy, and a
/// request that comes mid-round is posted by an arrival step after the WQE
/// or CQE in progress instead of waiting for the round's end (x1.8 of its
/// p99 alone before).
#[test]
fn a_ping_pong_is_served_mid_round_beside_a_loop_bound_tenant() {
    fairshare_passes_cell("lat-read-16 vs write-8b-64q-pl32", "measured", "arrival-step");
}

/// Experiment 1 under `perf` with the loop charged (`compare`'s default):
/// `perf` posts the stream's chunks and zero-weight WRs a quantum's worth
/// to a post list, and the ping-pong's request is taken in after the WQE in
/// progress, not after the list (D read x2.40 of its p99 alone with a mark
/// per post list), so D keeps its latency.
#[test]
fn perf_keeps_experiment_1s_ping_pong_with_the_loop_charged() {
    let out = scratch("exp1-perf-charged").join("c.json");
    let o = bin()
        .args(["compare", "runner/scenarios/paper/exp1.toml", "--policies", "perf", "--json"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = json(&out);
    let d = row_tenants(&doc, "perf").into_iter().find(|t| t["name"] == "D_single").expect("D");
    assert_eq!(d["contract"]["pass"], true, "D under perf, loop charged: {d}");
}

/// 64 B WRITEs on 256 QPs, 16 deep, beside a 64 KB SEND stream (a
/// held-out probe): once 9 of the tenant's QPs are in the NIC it is
/// admitted from those, but when none of them has anything left to admit
/// (each holds its 16 messages) the cap gives way, so the tenant's turn
/// is not wasted on a limit of its QP depth (it read 0.79 of its
/// entitlement, the stream 1.21).
#[test]
fn a_message_rate_tenant_on_many_shallow_qps_gets_its_share_beside_a_stream() {
    every_tenant_gets_its_share("bw-send-64k-1q_vs_write-64b-256q-pl16", "shallow");
}

/// One random mix of seed 2 under `policy` (`--filter "#N "`): its matrix
/// JSON and the runner's output.
fn random_mix(seed: u32, cell: u32, policy: &str, dir: &str) -> (Value, String) {
    let out = scratch(dir).join("m.json");
    let o = bin()
        .args(["matrix", "--random", "100", "--mix-seed", &seed.to_string(), "--hw", "none", "--policies", policy])
        .args(["--filter", &format!("#{cell} "), "--json"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (json(&out), String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Random mix #86 of seed 2: a 311 B READ stream, 1 deep, and two other
/// small tenants beside 221 QPs of 32 B WRITEs. Fair admission charges a
/// WRITE its RETH: without it a 32 B WRITE (134 B on the wire) was charged
/// 118, the full link looked 0.88 busy to the pipeline floor's check, the
/// floor grew fourfold, and every small tenant read 0.22 of its
/// entitlement.
#[test]
fn small_writes_are_charged_what_they_take_of_the_wire() {
    let (m, out) = random_mix(2, 86, "fairshare", "reth");
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{out}");
}

/// Random mix #49 of seed 2 (58 B WRITEs on 12 QPs beside 16 B READs on
/// 8) under windows of 1 KiB: the budget never falls below the pipeline's
/// bandwidth-delay product. The probe that measures it is not replaced
/// while it is out, so a direction that always holds a little in flight
/// is measured too (replaced by every post, it never was: the floor stayed
/// at 0 and both tenants ran at a fifth of their rate).
#[test]
fn the_pipeline_floor_holds_under_a_one_kib_window() {
    let policy = "fairshare:window_kib=1,read_window_kib=1";
    let (m, out) = random_mix(2, 49, policy, "floor");
    assert_eq!(passed(&m, policy), (1, 1, 0), "{out}");
}

/// Random mix #10 of seed 3: a 9331 B WRITE stream on 16 QPs beside
/// 38 KB SENDs on 88 QPs and 64 B READs on 45 QPs, 5 deep. A READ's
/// request takes a packet and a turn of the requester's send scheduler,
/// so fair admission admits a READ only while the WRITE direction has
/// room for its request too, or within the tenant's reservation there.
/// Charged only their responses, the READs filled the requester's side
/// unseen (1.42 of their entitlement) and the two WRITE-side tenants read
/// 0.84 of theirs.
#[test]
fn reads_are_charged_their_requests_on_the_requesters_side() {
    let (m, out) = random_mix(3, 10, "fairshare", "read-requests");
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{out}");
}

/// Random mix #98 of seed 4: a 4 KB WRITE ping-pong of weight 3 beside
/// 16 KB READs on 12 QPs, 8 deep. The ping-pong's replies cross the
/// responder's wire beside the READ responses without fair admission
/// seeing them: judged on the READ completions alone, that wire looked
/// idle, the READ budget's floor grew, and the replies waited behind more
/// responses (x1.62 of the ping-pong's p99 alone). Judged on the port's
/// counters, the busy wire grows nothing.
#[test]
fn a_wire_busy_with_traffic_not_admitted_keeps_the_floor_down() {
    let (m, out) = random_mix(4, 98, "fairshare", "wire-load");
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{out}");
}

/// Random mix #11 of seed 3: 16 B WRITEs 11 deep on 4 QPs beside a 130 KB
/// stream of weight 2 on 6 QPs. The small tenant moves less than its share
/// of the link, so it is entitled to its rate alone, which its round trip
/// sets: `fairshare`'s latency feedback watches it, and shrinks the budget
/// while it waits. Watched only when it kept two chunks in flight, it was
/// not (44 messages outstanding), and read 0.78 of its rate alone.
#[test]
fn a_tenant_below_its_share_is_watched_by_the_latency_feedback() {
    let (m, out) = random_mix(3, 11, "fairshare", "watched");
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{out}");
}

/// Random mix #2 of seed 3: a 43 KB WRITE ping-pong beside a 64 KB stream
/// and 634 B WRITEs on 69 QPs. Between its messages the ping-pong has no
/// data, so deficit round robin alone gave it a third of what is admitted
/// once it has (x1.93 of its p99 alone); behind the others in what it was
/// admitted per unit of weight, it is now served first until it catches up.
#[test]
fn a_tenant_behind_in_what_it_was_admitted_is_served_first() {
    let (m, out) = random_mix(3, 2, "fairshare", "behind");
    assert_eq!(passed(&m, "fairshare"), (1, 1, 0), "{out}");
}
