//! Fair admission: the data WQEs of tenants with an in-flight window
//! (ABI 1.3, `TenantPlan::window_kib` / `read_window_kib`) enter the NIC
//! under a budget they share, in weighted deficit round robin.
//!
//! The budget of a direction (WRITE / SEND on the requester's wire, READ
//! responses on the responder's) is the largest window among the tenants
//! with work: the bytes their posted, not yet completed WQEs hold stay
//! below it, so what queues in the NIC ahead of a new message stays short
//! whatever the tenants' QP counts. Which tenant gets the room a
//! completion frees is decided here, not by the NIC's round robin over
//! QPs: each visit gives a tenant a quantum in proportion to its weight,
//! and a tenant posts while its deficit lasts. Admissions, and so
//! completions, are shared by weight in bytes (payload plus the
//! per-packet overhead), whatever each tenant's round-trip time; and a
//! tenant behind the others in what it was admitted per unit of weight
//! (one that had no data for a while: a ping-pong, a shallow stream) is
//! served ahead of the round robin until it has caught up, counted at
//! most one budget behind (weighted max-min: the tenants that got least
//! first, `Dataplane::admit_behind`).
//! A sparse tenant (nothing in flight in a direction and no other message
//! waiting) may always post its message there, and a tenant may post past
//! the budget within its reservation (8 KiB x its weight, at most its
//! weighted share of the budget among the tenants waiting for admission),
//! the WQE included: a ping-pong or a sparse sender never waits for room,
//! even with a message already in flight. The budget is exceeded by at
//! most the reservations, which are bounded by it, and the sparse
//! tenants' one message each; a backlogged tenant that has drained waits
//! for room like the others (twenty of them each putting a chunk past the
//! budget queued a ping-pong's request behind twenty chunks in the NIC).
//! Beyond its reservation a tenant waits its turn, so the shares of
//! backlogged tenants stay those of the deficit round robin
//! (holding its weighted share of the in-flight bytes would not give a
//! tenant its share of the throughput: the NIC serves one WQE per QP per
//! turn, so a tenant with few QPs would see its WQEs wait longer than one
//! with many).
//!
//! Whatever the plans ask, the budget never falls below the bandwidth-delay
//! product of the NIC's pipeline, measured (`pipeline.rs`): below it the
//! wire waits for completions to travel back, so a policy's window can
//! shorten what queues in the NIC but not idle the link.
//!
//! The loop sees completions, and refills the NIC, once per round: in
//! virtual time with the loop's cost charged (`loop_cost.rs`) a round polls
//! before it posts, and the budget grows by what the link moves during one
//! round (the last one's length), so a loop made slow by a message-rate
//! tenant's work does not leave the wire idle between its rounds
//! (experiment 2: the 1 MB stream beside 16 B messages kept 18.8 Gb/s on
//! the plain budget). When rounds posted before they polled, a completion
//! waited up to two rounds for its refill and the budget grew by two:
//! the round the extra stayed queued in the NIC was what a ping-pong beside
//! a busy loop waited behind (x1.5 to x1.8 of its p99 alone).
//!
//! A round's work follows what it admits, not the tenants waiting for
//! room: the tenants with data, their weights, who is behind and who may
//! post without room are kept in an index (`fair_index.rs`) that the
//! events of the `admit` ready set (`ready.rs`: arrivals, activations,
//! completions, posts, plan changes) bring up to date. The tenants behind
//! are served least first from it, the round robin walks its members from
//! where the last round stopped until the budget is full, and then only
//! those the index says may post without room are visited. A tenant that
//! finds no room keeps its deficit and its QP pointer for its turn. At a
//! thousand backlogged tenants each round used to visit all of them
//! (`benches/scale.rs`, `fairshare`: 27.9x the cost per WQE of ten). The
//! budget and the bytes in flight under it are kept up to date as plans
//! change and WQEs post and retire, not summed over the tenants each
//! round.

use super::fair_index::DirFacts;
use super::qp::ChargedOp;
use super::*;

/// Bytes a tenant of weight 1 may admit per visit.
const QUANTUM_BYTES: i64 = 16 * 1024;

/// The most messages one admission posts as a post list
/// ([`Dataplane::list_len`]): perftest's `-l 32`.
const MAX_LIST: u32 = 32;

/// In-flight bytes a tenant of weight 1 may hold whatever the others hold.
const RESERVED_BYTES: u64 = 8 * 1024;

/// One direction's admission walk in a round.
struct Walk {
    /// 0: WRITE / SEND, 1: READ.
    dir: usize,
    /// The budget of each direction this round.
    budgets: [u64; 2],
    /// Windowed bytes in flight in `dir`, with what the walk admitted.
    total: u64,
    /// The weights of the tenants with data to admit in `dir`, and of
    /// those with data to admit in either (a READ request's reservation
    /// on the requester's side is a share among them).
    weights: u64,
    request_weights: u64,
    /// The first tenant that found no room.
    stopped_at: Option<usize>,
    /// Whether anything was posted.
    did: bool,
}

impl Walk {
    /// Whether the direction's budget has room.
    fn room(&self) -> bool {
        let budget = self.budgets[self.dir];
        budget == 0 || self.total < budget
    }
}

impl<R: Rnic> Dataplane<R> {
    /// Admits the windowed tenants' data (see the module comment). Returns
    /// whether anything was posted.
    pub(super) fn admit(&mut self, now: u64) -> Result<bool, RnicError> {
        // The budget covers the NIC's pipeline with the loop answering at
        // once. A loop that takes a while per round (its charged cost) sees
        // a completion at its next round, which polls before it posts and
        // so refills at once: the budget also covers what the link moves
        // in one round (the last one's length).
        let round_bytes = (self.link_bytes_per_ns * self.clock.last_round_ps as f64 / 1000.0) as u64;
        // Never below the bandwidth-delay product of the NIC's pipeline
        // (`pipeline.rs`), whatever the plans ask: work conservation.
        let link = self.link_bytes_per_ns;
        let mut budget = [0u64; 2];
        for (dir, b) in budget.iter_mut().enumerate() {
            let window = self.window_budget[dir];
            if window > 0 {
                *b = window.max(self.pipeline.floor_bytes(dir == 1, link)) + round_bytes;
            }
        }
        (self.signal_bytes, self.uncovered_cap) = self.signal_bounds(budget);
        self.refresh_fair_index();
        if self.step_only.is_none() {
            self.admit_round = self.counters.rounds;
        }
        let mut did = false;
        for dir in 0..2 {
            did |= self.admit_direction(dir, budget, now)?;
        }
        Ok(did)
    }

    /// Brings the index (`fair_index.rs`) up to date for the tenants in
    /// the `admit` ready set (those with an event since the last round),
    /// and empties the set.
    fn refresh_fair_index(&mut self) {
        let n = self.tenants.len();
        let mut i = 0;
        while let Some(t) = self.ready.admit.next_below(i, n) {
            i = t + 1;
            self.ready.admit.remove(t);
            self.index_tenant(t);
        }
    }

    /// Sets tenant `t`'s entry in the index from its QPs. A direction it
    /// has no data to admit in loses its deficit (deficit round robin).
    fn index_tenant(&mut self, t: usize) {
        let ts = &self.tenants[t];
        let windowed = self.plans[t].windowed() && !ts.paused && !ts.removed;
        let w = ts.weight.max(1) as u64;
        let sparse = windowed && self.sparse(t);
        let facts = [0, 1].map(|dir| {
            let (qi, _) = self.peek_data_qp(t, dir).filter(|_| windowed)?;
            let ts = &self.tenants[t];
            let held = ts.inflight[dir];
            let next = self.qps[qi].next_bytes(self.plans[t].split.chunk_bytes);
            Some(DirFacts {
                admitted: ts.admitted_per_weight[dir],
                need: (held + next <= RESERVED_BYTES * w).then(|| (held + next) as f64 / w as f64),
                sparse: held == 0 && sparse,
            })
        });
        for (dir, f) in facts.iter().enumerate() {
            if f.is_none() {
                self.tenants[t].deficit[dir] = 0;
            }
        }
        self.fair.set(t, w, facts);
    }

    /// One direction's admission (`dir` 0: WRITE / SEND on the
    /// requester's wire, 1: READ responses on the responder's) under its
    /// budget: the tenants behind the others first, then the deficit
    /// round robin while the budget has room, then those that may post
    /// without room. The directions are separate resources, each with its
    /// own rotation and deficits: with one shared rotation, a tenant that
    /// always found its READ budget full set every round's start, and the
    /// tenant after it came before the one after that in the other
    /// direction every round, taking the room each round freed there.
    ///
    /// A READ's request holds room on the requester's side too (its packet
    /// and a turn of the requester's send scheduler, `WindowCharge`), so
    /// a READ is admitted only while the WRITE direction also has room for
    /// it, or within the tenant's reservation there: READs cannot fill the
    /// requester's send scheduler behind the WRITE budget's back.
    ///
    /// A tenant that finds no room is not visited again in the round: it
    /// keeps its deficit and its QP pointer for its turn. So the round's
    /// work follows what it admits, not the tenants waiting for room.
    fn admit_direction(&mut self, dir: usize, budgets: [u64; 2], now: u64) -> Result<bool, RnicError> {
        let start = self.admit_next[dir].min(self.tenants.len());
        // The reservations are shares among the tenants with data to
        // admit in this direction, so together they stay within the
        // budget; a READ request's reservation on the requester's side is
        // a share among every tenant with data to admit there or here.
        let mut walk = Walk {
            dir,
            budgets,
            total: self.windowed_inflight[dir],
            weights: self.fair.dirs[dir].weights.max(1),
            request_weights: self.fair.any_weights.max(1),
            stopped_at: None,
            did: false,
        };
        self.admit_behind(&mut walk, now)?;
        self.admit_round_robin(&mut walk, start, now)?;
        self.admit_unbudgeted(&mut walk, start, now)?;
        // The next round starts with the first tenant that found no room.
        if let Some(t) = walk.stopped_at {
            self.admit_next[dir] = t;
        }
        Ok(walk.did)
    }

    /// Serves first the tenants behind the others in what fair admission
    /// gave them per unit of weight, the furthest behind first, each until
    /// it has caught up with the lead or finds no room.
    ///
    /// Deficit round robin shares what is admitted among the tenants with
    /// data to admit *now*: a tenant that had none for a while (a
    /// ping-pong between its messages, a shallow stream waiting for its
    /// round trips) gets no more than the others once it has, so a 43 KB
    /// ping-pong beside two bulk tenants was admitted at a third of the
    /// link and read x1.93 of its p99 alone (random mix #2 of seed 3).
    /// Weighted max-min fairness, which the contract judges by, serves the
    /// tenants that got least first. So each tenant keeps its bytes
    /// admitted per unit of weight, and a tenant with data to admit that
    /// is behind the lead (the most any such tenant got per unit of
    /// weight) is served ahead of the round robin until it has caught up.
    /// The lag is bounded: a tenant is counted at most one budget (of its
    /// weight) behind the lead, so one that was idle long, or that had no
    /// data when the others started, takes at most a budget ahead of them.
    /// Tenants with data all along stay level with the lead and are left
    /// to the round robin. A direction without a budget admits all it can
    /// in the round robin: no one waits there.
    fn admit_behind(&mut self, walk: &mut Walk, now: u64) -> Result<(), RnicError> {
        let dir = walk.dir;
        let most_behind = walk.budgets[dir] as f64;
        let Some(lead) = self.fair.lead(dir).filter(|_| most_behind > 0.0) else { return Ok(()) };
        if let Some(only) = &self.step_only {
            // An arrival step: its tenants only.
            let mut behind = std::mem::take(&mut self.scratch.behind);
            behind.clear();
            for &t in only {
                let t = t as usize;
                let at = self.tenants[t].admitted_per_weight[dir];
                if self.fair.member(t, dir) && at < lead {
                    behind.push((at, t));
                }
            }
            behind.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for &(_, t) in &behind {
                if !self.has_room(walk) {
                    break;
                }
                self.serve_behind(t, lead, walk, now)?;
            }
            self.scratch.behind = behind;
        } else {
            // Least first, from the index. A tenant served that stays
            // behind comes again later in the order: it is not served
            // twice in a walk.
            self.admit_walks += 1;
            let mut at = None;
            while let Some((admitted, t, pos)) = self.fair.next_behind(dir, at) {
                at = Some(pos);
                if admitted >= lead {
                    break;
                }
                if self.tenants[t].behind_walk == self.admit_walks {
                    continue;
                }
                if !walk.room() {
                    // The budget is full: the tenant furthest behind of
                    // those left is the first held.
                    self.hold(t, walk, dir == 1)?;
                    break;
                }
                if self.send_cq_budget() == 0 {
                    break;
                }
                self.tenants[t].behind_walk = self.admit_walks;
                self.serve_behind(t, lead, walk, now)?;
            }
        }
        Ok(())
    }

    /// Admits tenant `t`'s data until it has caught up with `lead` or
    /// finds no room (see [`Dataplane::admit_behind`]). It is first
    /// brought to at most one budget behind the lead.
    fn serve_behind(&mut self, t: usize, lead: f64, walk: &mut Walk, now: u64) -> Result<(), RnicError> {
        let dir = walk.dir;
        let floor = lead - walk.budgets[dir] as f64 / self.tenants[t].weight.max(1) as f64;
        let admitted = &mut self.tenants[t].admitted_per_weight[dir];
        *admitted = admitted.max(floor);
        let before = *admitted;
        while self.tenants[t].admitted_per_weight[dir] < lead {
            let Some((qi, j)) = self.peek_data_qp(t, dir) else { break };
            // What fits the tenant's reservation (or goes as a sparse
            // tenant's message) never waits for room: it needs no
            // precedence, and posted ahead it would take the shared
            // room that keeps the pipeline full from the others.
            if self.needs_no_room(t, qi, walk) {
                break;
            }
            self.tenants[t].next_qp[dir] = j;
            self.tenants[t].visit_round = self.counters.rounds;
            if self.admit_one(t, qi, walk, now)?.is_none() {
                break;
            }
        }
        let after = self.tenants[t].admitted_per_weight[dir];
        self.counters.admit_idle_visits += u64::from(after == before);
        self.fair.retag(t, dir, after);
        Ok(())
    }

    /// Whether the walk's direction has room, and the shared send CQ room
    /// for a data WQE (without it no QP can post data).
    fn has_room(&self, walk: &Walk) -> bool {
        walk.room() && self.send_cq_budget() > 0
    }

    /// The deficit round robin over the tenants with data, from `start`,
    /// pass after pass while the budget has room and a pass admits
    /// something: each visit tops the tenant's deficit up by a quantum in
    /// proportion to its weight, and it posts while its deficit lasts.
    fn admit_round_robin(&mut self, walk: &mut Walk, start: usize, now: u64) -> Result<(), RnicError> {
        let dir = walk.dir;
        loop {
            let mut progress = false;
            let mut pos = (start, false);
            while let Some(t) = self.next_in_rotation(dir, start, &mut pos) {
                if !self.fair.member(t, dir) {
                    continue;
                }
                if !self.has_room(walk) {
                    // The first tenant the full budget holds (the first
                    // of the rotation if the tenants behind took it all).
                    if !walk.room() && walk.stopped_at.is_none() {
                        self.hold(t, walk, dir == 1)?;
                    }
                    return Ok(());
                }
                let Some(mut qi) = self.next_data_qp(t, dir) else {
                    self.tenants[t].deficit[dir] = 0;
                    self.ready.admit.insert(t);
                    self.counters.admit_idle_visits += 1;
                    continue;
                };
                self.tenants[t].visit_round = self.counters.rounds;
                let quantum = QUANTUM_BYTES * self.tenants[t].weight.max(1) as i64;
                if self.tenants[t].deficit[dir] <= 0 {
                    self.tenants[t].deficit[dir] += quantum;
                }
                let mut posted = false;
                while self.tenants[t].deficit[dir] > 0 {
                    let Some(charged) = self.admit_one(t, qi, walk, now)? else { break };
                    self.tenants[t].deficit[dir] -= charged as i64;
                    posted = true;
                    match self.next_data_qp(t, dir) {
                        Some(q) => qi = q,
                        None => {
                            self.tenants[t].deficit[dir] = 0;
                            break;
                        }
                    }
                }
                if posted {
                    progress = true;
                    self.fair.retag(t, dir, self.tenants[t].admitted_per_weight[dir]);
                } else {
                    self.counters.admit_idle_visits += 1;
                }
            }
            if !progress {
                break;
            }
        }
        Ok(())
    }

    /// With the budget full: the tenants that may post without room, as
    /// sparse tenants or within their reservations (from the index), in
    /// the round robin's order, each while it may.
    fn admit_unbudgeted(&mut self, walk: &mut Walk, start: usize, now: u64) -> Result<(), RnicError> {
        let dir = walk.dir;
        if walk.budgets[dir] == 0 || self.send_cq_budget() == 0 {
            return Ok(());
        }
        let reserved = (walk.budgets[dir] as f64 / walk.weights as f64).min(RESERVED_BYTES as f64);
        let mut cands = std::mem::take(&mut self.scratch.admit);
        cands.clear();
        self.fair.may_post_unbudgeted(dir, reserved, &mut cands);
        if self.step_only.is_some() {
            cands.retain(|&t| self.in_step(t));
        }
        cands.sort_unstable_by_key(|&t| (t < start, t));
        cands.dedup();
        for &t in &cands {
            let quantum = QUANTUM_BYTES * self.tenants[t].weight.max(1) as i64;
            let mut posted = false;
            while let Some((qi, j)) = self.peek_data_qp(t, dir) {
                if !self.needs_no_room(t, qi, walk) {
                    break;
                }
                self.tenants[t].next_qp[dir] = j;
                self.tenants[t].visit_round = self.counters.rounds;
                if self.tenants[t].deficit[dir] <= 0 {
                    self.tenants[t].deficit[dir] += quantum;
                }
                let Some(charged) = self.admit_one(t, qi, walk, now)? else { break };
                self.tenants[t].deficit[dir] -= charged as i64;
                posted = true;
            }
            if posted {
                if self.peek_data_qp(t, dir).is_none() {
                    self.tenants[t].deficit[dir] = 0;
                }
                self.fair.retag(t, dir, self.tenants[t].admitted_per_weight[dir]);
            } else {
                self.counters.admit_idle_visits += 1;
            }
        }
        self.scratch.admit = cands;
        Ok(())
    }

    /// The next tenant of `dir`'s round robin after `pos` (where to look
    /// next, and whether the walk wrapped), in the rotated order from
    /// `start`: the members of the index, or in an arrival step the
    /// step's tenants.
    fn next_in_rotation(&self, dir: usize, start: usize, pos: &mut (usize, bool)) -> Option<usize> {
        let n = self.tenants.len();
        loop {
            let (i, wrapped) = *pos;
            let limit = if wrapped { start } else { n };
            let found = match &self.step_only {
                None => self.fair.dirs[dir].with_data.next_below(i, limit),
                Some(only) => {
                    let k = only.partition_point(|&x| (x as usize) < i);
                    only.get(k).map(|&x| x as usize).filter(|&x| x < limit)
                }
            };
            match found {
                Some(t) => {
                    pos.0 = t + 1;
                    return Some(t);
                }
                None if !wrapped => *pos = (0, true),
                None => return None,
            }
        }
    }

    /// Whether tenant `t`'s next data WQE from QP `qi` may go in the
    /// walk's direction without room in the shared budget: as a sparse
    /// tenant's message, or within its reservation, the WQE included. Past
    /// the budget a tenant posts only so, so the reservations bound what
    /// goes past it (many tenants each putting one chunk past the budget
    /// would queue a small message in the NIC behind all of them).
    fn needs_no_room(&self, t: usize, qi: usize, walk: &Walk) -> bool {
        let held = self.tenants[t].inflight[walk.dir];
        let w = self.tenants[t].weight.max(1) as u64;
        let reserved = (walk.budgets[walk.dir] * w / walk.weights).min(RESERVED_BYTES * w);
        (held == 0 && self.sparse(t)) || held + self.qps[qi].next_bytes(self.plans[t].split.chunk_bytes) <= reserved
    }

    /// Posts tenant `t`'s next data WQE from QP `qi` in the walk's
    /// direction if there is room for it (see the module comment), and
    /// returns its charge; `None` when there is no room or the QP could
    /// not post.
    fn admit_one(&mut self, t: usize, qi: usize, walk: &mut Walk, now: u64) -> Result<Option<u64>, RnicError> {
        let (dir, budget) = (walk.dir, walk.budgets[walk.dir]);
        let held = self.tenants[t].inflight[dir];
        let w = self.tenants[t].weight.max(1) as u64;
        let sparse = || held == 0 && self.sparse(t);
        let open = budget == 0 || walk.total < budget || self.needs_no_room(t, qi, walk);
        // A READ's request on the requester's side.
        let request_open = dir == 0 || {
            let request_bytes = WindowCharge::read_request(self.wqe_turn_bytes) as u64;
            let (budget, held) = (walk.budgets[0], self.tenants[t].inflight[0]);
            budget == 0
                || self.windowed_inflight[0] < budget
                || held + request_bytes <= (budget * w / walk.request_weights).min(RESERVED_BYTES * w)
                || (held == 0 && sparse())
        };
        if !open || !request_open {
            self.hold(t, walk, dir == 1 && !open)?;
            return Ok(None);
        }
        let before = self.tenants[t].inflight[dir];
        let list = self.list_len(t, qi, walk);
        walk.did |= self.post_qp(qi, true, now, list)?;
        // What it has to admit changed: the index takes it again.
        self.ready.admit.insert(t);
        let charged = self.tenants[t].inflight[dir].saturating_sub(before);
        if charged == 0 {
            // The QP could not post (send queue full, bucket in debt).
            return Ok(None);
        }
        walk.total += charged;
        self.tenants[t].admitted_per_weight[dir] += charged as f64 / w as f64;
        Ok(Some(charged))
    }

    /// How many data WQEs QP `qi` of tenant `t` posts in this admission:
    /// one, or a post list of the small whole messages at the head of its
    /// queue (WRITE and SEND under [`split::GROUP_BYTES`]) that fit both
    /// the room (the budget's, or the tenant's reservation's when the
    /// budget is full) and the tenant's deficit together, so a
    /// message-rate tenant's messages enter the NIC as the lists it
    /// posted them in, sharing one doorbell and one CQE, as they would
    /// alone. What the list is charged is what its messages would have
    /// been charged one by one.
    ///
    /// [`split::GROUP_BYTES`]: super::split::GROUP_BYTES
    fn list_len(&self, t: usize, qi: usize, walk: &Walk) -> u32 {
        let q = &self.qps[qi];
        if walk.dir != 0 || q.cursor.is_some() {
            return 1;
        }
        let budget = walk.budgets[0];
        // The budget's room, or with the budget full the tenant's own
        // reservation's (what `needs_no_room` lets it post past the budget).
        let room = if budget == 0 {
            u64::MAX
        } else {
            let w = self.tenants[t].weight.max(1) as u64;
            let reserved = (budget * w / walk.weights.max(1)).min(RESERVED_BYTES * w);
            budget.saturating_sub(walk.total).max(reserved.saturating_sub(self.tenants[t].inflight[0]))
        };
        let mut left = room.min(self.tenants[t].deficit[0].max(0) as u64);
        let most = self.list_cap();
        let mut n = 0u32;
        for wr in &q.held {
            let op = match wr.op {
                RequestOp::Write { .. } | RequestOp::WriteImm { .. } => ChargedOp::Write,
                RequestOp::Send => ChargedOp::Send,
                _ => break,
            };
            if n >= most || wr.len as u64 >= split::GROUP_BYTES {
                break;
            }
            let c = WindowCharge::data(wr.len, op, self.wqe_turn_bytes).bytes() as u64;
            if c > left {
                break;
            }
            left -= c;
            n += 1;
        }
        n.max(1)
    }

    /// The most messages an admission's list holds: [`MAX_LIST`], and with
    /// the loop charged no more than a quarter of a tenant's quantum of the
    /// loop (`loop_share.rs`) takes to post and complete, so that the
    /// tenants sharing the loop still take their turns in it a few
    /// messages at a time (lists of half the quantum held experiment 4's
    /// ping-pong to x1.6 of its p99 alone, and one beside 64 QPs of 8 B
    /// WRITEs to x1.6; at a quarter both keep what they had with one
    /// message per admission).
    fn list_cap(&self) -> u32 {
        if !self.loop_shared() {
            return MAX_LIST;
        }
        let c = &self.cfg.loop_cost;
        let message = c.wqe_ps.saturating_add(c.completion_ps).saturating_add(self.call_cost_ps()).max(1);
        let quarter = self.loop_quantum_ps() as u64 / 4;
        (quarter / message).clamp(1, MAX_LIST as u64) as u32
    }

    /// Tenant `t` found no room (in the READ responder's budget if
    /// `read`, else on the requester's wire): the hold is counted and
    /// tells the pipeline's floor that the budget held data back, the
    /// next round starts with the first tenant held, and the backstop of
    /// [`Dataplane::signal_bounds`] runs.
    fn hold(&mut self, t: usize, walk: &mut Walk, read: bool) -> Result<(), RnicError> {
        self.counters.window_holds += 1;
        self.pipeline.held(read);
        walk.stopped_at.get_or_insert(t);
        if self.uncovered_bytes > 0 && walk.total <= self.uncovered_bytes {
            walk.did |= self.cover_unsignaled_from(t, walk.dir)?;
        }
        Ok(())
    }

    /// Whether tenant `t` has at most one message waiting to be posted, the
    /// one being admitted (a ping-pong's request, a sparse sender's
    /// message): such a tenant, with nothing in flight, posts whatever the
    /// others hold. A backlogged tenant that happens to have drained waits
    /// for room like the others: many bulk tenants draining in turn would
    /// otherwise each put a chunk past the budget, and a small message
    /// would queue in the NIC behind all of them.
    fn sparse(&self, t: usize) -> bool {
        let waiting: usize = self.tenants[t]
            .qps
            .iter()
            .map(|&qi| &self.qps[qi])
            .map(|q| q.held.len() + usize::from(q.cursor.is_some()))
            .sum();
        waiting <= 1
    }

    /// Tenant `t`'s QP to admit data from in direction `dir`: the one it
    /// admitted from last there if that QP is in the middle of a message
    /// (messages complete one after the other), else the next of its QPs
    /// with work in that direction, round robin; and once [`NIC_QPS_CAPA`]
    /// of its QPs have WQEs in the NIC, one of those. The NIC takes its
    /// QPs in turn, one turn each: a tenant's WQEs spread over more QPs
    /// than saturate the NIC's scheduler gain it nothing, and a new
    /// message of any tenant waits for a turn of each (a READ tenant's
    /// requests behind 64 QPs of 8 B WRITEs got 0.77 of its throughput).
    /// The cap gives way when none of the QPs in the NIC has anything left
    /// to admit: a QP counts there until its last completion, round trip
    /// included, so a tenant of shallow QPs (256 of 16 messages each) held
    /// only 144 messages in the NIC under it and got 0.79 of its share
    /// beside a stream.
    ///
    /// [`NIC_QPS_CAPA`]: super::qp::NIC_QPS_CAPA
    fn next_data_qp(&mut self, t: usize, dir: usize) -> Option<usize> {
        let (qi, j) = self.peek_data_qp(t, dir)?;
        self.tenants[t].next_qp[dir] = j;
        Some(qi)
    }

    /// The QP [`Dataplane::next_data_qp`] would take, and its place among
    /// the tenant's QPs, without moving the tenant's pointer.
    fn peek_data_qp(&self, t: usize, dir: usize) -> Option<(usize, usize)> {
        let ts = &self.tenants[t];
        let m = ts.qps.len();
        let capped = self.plans[t].max_active_qps > 0;
        let ready = |q: &DpQp| data_ready(q, capped, Some(dir));
        let at = ts.next_qp[dir] % m.max(1);
        let cur = *ts.qps.get(at)?;
        if self.qps[cur].cursor.is_some() && ready(&self.qps[cur]) {
            return Some((cur, at));
        }
        let in_nic = ts.qps_in_nic >= super::qp::NIC_QPS_CAPA;
        let mut outside = None;
        for k in 1..=m {
            let j = (ts.next_qp[dir] + k) % m;
            let qi = ts.qps[j];
            if !ready(&self.qps[qi]) {
                continue;
            }
            if !in_nic || !self.qps[qi].posted.is_empty() {
                return Some((qi, j));
            }
            outside.get_or_insert(j);
        }
        // None of the QPs in the NIC has anything left to admit (their
        // messages are all posted): the cap would waste the tenant's turn.
        let j = outside?;
        Some((ts.qps[j], j))
    }
}

/// Whether fair admission may admit data from `q` (of a tenant `capped`
/// or not), in direction `dir` (0: WRITE / SEND, 1: READ) or in either.
fn data_ready(q: &DpQp, capped: bool, dir: Option<usize>) -> bool {
    !q.failed
        && !q.parked
        && q.has_work()
        && (!capped || q.active)
        && q.pending_wait.is_none()
        && dir.is_none_or(|d| q.next_is_read() == (d == 1))
}
