//! The whole-message lane: the run of messages at the head of a QP's held
//! queue that go whole by the plan's rule, with no policy call (a policy
//! that declares such answers its own, ABI 1.5), each built straight into
//! one WQE of the QP's post list. Nothing of a message's general path
//! applies to them: no cursor, no split, no rendezvous, no zero-weight WR
//! (a whole message has none), no window (a windowed tenant posts through
//! fair admission). What they still do is what every message does: take
//! a RECV of the peer's if it consumes one, be signaled where grouping or
//! the send queue's room needs it, count towards the tenant's token
//! bucket and in-flight bytes, and pay the loop for its WQE, its share of
//! a CQE and its completion.

use super::loop_share::WqeCounts;
use super::post::policy_op;
use super::qp::ChargedOp;
use super::split::INLINE_MAX;
use super::*;

/// What a run of the lane works with: the post list being built and its
/// signaling state.
pub(super) struct LaneList<'a> {
    pub specs: &'a mut Vec<WqeSpec>,
    /// Send-queue slots left for data WQEs.
    pub room: &'a mut u32,
    /// Payload of whole messages unsignaled since the last signal
    /// ([`split::GROUP_BYTES`]).
    pub grouped: &'a mut u64,
    pub signal_every: u32,
    pub turn_bytes: u32,
}

impl<R: Rnic> Dataplane<R> {
    /// Whether tenant `t`'s messages may take the lane in this post: not
    /// windowed, no active-QP cap (its quantum counts each message), and
    /// a policy that answers some requests from the plan.
    pub(super) fn whole_lane_open(&self, plan: &TenantPlan, max_chunks: u32) -> bool {
        max_chunks == u32::MAX
            && plan.max_active_qps == 0
            && !plan.windowed()
            && self.policy.request_calls() != perf_policy_sdk::RequestCalls::Every
    }

    /// Builds the WQEs of the messages at QP `qi`'s head that go whole,
    /// while the list has room, the loop's share and the tenant's bucket
    /// allow. Returns how many messages it took; 0 leaves the head to the
    /// general path.
    pub(super) fn post_whole_run(&mut self, qi: usize, t: usize, now: u64, list: &mut LaneList<'_>) -> u32 {
        let call = self.call_cost_ps();
        let mut taken = 0;
        while *list.room > 0 {
            if taken > 0 && (!self.loop_may_post(t) || !self.tenants[t].bucket.may_post(now)) {
                break;
            }
            let q = &mut self.qps[qi];
            let Some(head) = q.held.front() else { break };
            let Some((opcode, charged)) = split::whole_opcode(&head.op) else { break };
            if !self.policy.answers_whole(head.len as u64, policy_op(&head.op), &self.plans[t]) {
                break;
            }
            self.charge_loop(t, call);
            let q = &mut self.qps[qi];
            let Some(wr) = q.held.pop_front() else { break };
            q.peer_recvs += matches!(wr.op, RequestOp::Send | RequestOp::WriteImm { .. }) as u64;
            let len = wr.len;
            let signaled = *list.grouped + len as u64 >= split::GROUP_BYTES || q.since_signal + 1 >= list.signal_every;
            if signaled {
                q.since_signal = 0;
                *list.grouped = 0;
            } else {
                q.since_signal += 1;
                *list.grouped += len as u64;
            }
            let charge = WindowCharge::data(len, charged, list.turn_bytes);
            let inline = len <= INLINE_MAX && charged != ChargedOp::Read;
            list.specs.push(WqeSpec {
                opcode,
                sge: (len > 0).then(|| wr.mr.sge(wr.offset as usize, len)),
                inline,
                signaled,
                meta: Meta::App { wr_id: wr.wr_id, len, posted_ns: wr.posted_ns },
                charge,
            });
            q.outstanding += 1;
            q.active_requests += 1;
            q.active_bytes += len as u64;
            *list.room -= 1;
            taken += 1;
            self.tenants[t].bucket.take(len as u64);
            self.tenants[t].charge_window(charge, None);
            let wqe = WqeCounts { wqes: 1, chunks: 0, inline: inline as u64, signaled: signaled as u64 };
            let ps = self.post_cost_ps(wqe, 1);
            self.precharge_loop(t, ps);
        }
        taken
    }
}
