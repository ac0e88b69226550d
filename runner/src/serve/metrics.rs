//! `perf-runner serve --metrics ADDR`: the daemon's counters in the
//! Prometheus text format (0.0.4, `prometheus-client`'s encoder) over HTTP
//! (`tiny_http`), at `http://ADDR/metrics`.
//!
//! A scrape asks the loop for two things at its next round boundary: the
//! operator's snapshot (loop and policy counters, every engine tenant's
//! deliveries, backlog and pause state) and the clients' ring counters
//! (requests taken, completions by outcome, bytes, summed latency). Both
//! are counted by the loop anyway, so the metrics cost nothing between
//! scrapes. A client that leaves takes its `perf_client_*` series with it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use perf_dataplane::engine::{DataplaneSnapshot, OperatorHandle};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How long a scrape waits for the loop.
const SCRAPE_WAIT: Duration = Duration::from_secs(2);

/// One client's counters, as the loop keeps them.
#[derive(Debug, Clone, Default)]
pub(super) struct ClientMetrics {
    /// Its tenant's name.
    pub tenant: String,
    /// Requests taken from its ring.
    pub taken: u64,
    /// Completions written to its ring, successful.
    pub ok: u64,
    /// Completions written to its ring with an error status.
    pub errors: u64,
    /// Bytes of its successful send-side completions.
    pub bytes: u64,
    /// Its completions' latencies (taken to completed).
    pub latency: LatencyCounts,
    /// Requests taken and not yet completed.
    pub outstanding: u64,
}

/// Upper bounds of the completion-latency histogram's buckets, ns (the
/// last bucket, `+Inf`, takes the rest): from a loopback round trip on an
/// idle daemon to a loaded one's tail.
pub(super) const LATENCY_BOUNDS_NS: [u64; 12] =
    [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 10_000_000, 100_000_000];

/// A client's completion latencies, counted as the ring bridge writes
/// them: their sum, and how many fell in each bucket of
/// [`LATENCY_BOUNDS_NS`] (not cumulative; the last is `+Inf`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct LatencyCounts {
    /// Sum of the latencies, ns.
    pub sum_ns: u64,
    /// Completions per bucket.
    pub buckets: [u64; LATENCY_BOUNDS_NS.len() + 1],
}

impl LatencyCounts {
    /// Counts one completion's latency.
    pub fn record(&mut self, ns: u64) {
        self.sum_ns = self.sum_ns.saturating_add(ns);
        let at = LATENCY_BOUNDS_NS.iter().position(|&b| ns <= b).unwrap_or(LATENCY_BOUNDS_NS.len());
        self.buckets[at] += 1;
    }

    /// Completions counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// [`LatencyCounts`] as a Prometheus histogram (`_bucket`, `_sum`,
/// `_count`), in seconds; set at each scrape from the bridge's counts.
#[derive(Debug, Clone, Default)]
struct LatencyHistogram(Arc<std::sync::Mutex<LatencyCounts>>);

impl prometheus_client::metrics::TypedMetric for LatencyHistogram {
    const TYPE: prometheus_client::metrics::MetricType = prometheus_client::metrics::MetricType::Histogram;
}

impl prometheus_client::encoding::EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        let c = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        let bounds = LATENCY_BOUNDS_NS.iter().map(|&b| b as f64 / 1e9).chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(c.buckets).collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            c.sum_ns as f64 / 1e9,
            c.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// What the loop's hub answers to a scrape.
#[derive(Debug, Clone, Default)]
pub(super) struct HubMetrics {
    /// Every connected client (closing ones included).
    pub clients: Vec<ClientMetrics>,
    /// Clients closed so far (gone, killed or broken).
    pub closed: u64,
    /// Clients whose ring the daemon found broken.
    pub broken: u64,
}

/// Asks the hub for its counters (through the setup channel).
pub(super) type AskHub = Box<dyn Fn() -> Result<HubMetrics, String> + Send>;

/// The running metrics endpoint.
pub(super) struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: JoinHandle<()>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listens on `addr` and answers scrapes on a thread of its own.
    pub(super) fn start(
        addr: &str,
        op: OperatorHandle,
        ask_hub: AskHub,
        started: Instant,
    ) -> anyhow::Result<MetricsServer> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("--metrics {addr}: cannot listen"))?;
        let addr = server.server_addr().to_ip().with_context(|| format!("--metrics {addr}: not an IP address"))?;
        let server = Arc::new(server);
        let s = server.clone();
        let thread = std::thread::Builder::new()
            .name("perf-metrics".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let path = req.url().split('?').next().unwrap_or("").to_string();
                    let response = if path != "/metrics" {
                        tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                    } else {
                        match scrape(&op, &ask_hub, started) {
                            Ok(text) => {
                                let mut r = tiny_http::Response::from_string(text);
                                if let Ok(h) =
                                    tiny_http::Header::from_bytes("Content-Type", prometheus_text::CONTENT_TYPE)
                                {
                                    r.add_header(h);
                                }
                                r
                            }
                            Err(e) => tiny_http::Response::from_string(format!("{e}\n")).with_status_code(503),
                        }
                    };
                    if let Err(e) = req.respond(response) {
                        tracing::debug!("metrics: answering a scrape: {e}");
                    }
                }
            })
            .context("starting the metrics thread")?;
        Ok(MetricsServer { server, thread, addr })
    }

    /// The address it listens on (the port chosen, with `:0`).
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening.
    pub(super) fn stop(self) {
        self.server.unblock();
        let _ = self.thread.join();
    }
}

/// One scrape: the loop's snapshot and the clients' counters, encoded.
fn scrape(op: &OperatorHandle, ask_hub: &AskHub, started: Instant) -> anyhow::Result<String> {
    let snap = op.snapshot(SCRAPE_WAIT).context("the dataplane's snapshot")?;
    let hub = ask_hub().map_err(|e| anyhow::anyhow!("the clients' counters: {e}"))?;
    encode(&snap, &hub, started.elapsed())
}

type Labels = Vec<(&'static str, String)>;

/// A counter family with one label set per row, registered under `name`.
fn counters(reg: &mut Registry, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, u64)>) {
    let family = Family::<Labels, Counter>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).inc_by(v);
    }
    reg.register(name, help, family);
}

/// A gauge family with one label set per row, registered under `name`.
fn gauges(reg: &mut Registry, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, i64)>) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).set(v);
    }
    reg.register(name, help, family);
}

/// The metrics text of one snapshot.
pub(super) fn encode(snap: &DataplaneSnapshot, hub: &HubMetrics, uptime: Duration) -> anyhow::Result<String> {
    let mut reg = Registry::default();
    let c = &snap.counters;
    let none = Labels::new;
    let loop_counters: [(&str, &str, u64); 16] = [
        ("perf_loop_rounds", "Rounds of the dataplane loop", c.rounds),
        ("perf_loop_busy_rounds", "Rounds that did something", c.busy_rounds),
        ("perf_loop_requests", "Application requests accepted by the loop", c.requests),
        ("perf_loop_refused", "Requests refused at the door (bad QP, region or bounds)", c.refused),
        ("perf_loop_completions", "Application completions delivered", c.completions),
        ("perf_loop_wqes_posted", "WQEs posted to the NIC (all kinds)", c.wqes_posted),
        ("perf_loop_data_wqes", "Data WQEs posted (chunks and whole messages)", c.data_wqes),
        ("perf_loop_doorbells", "Post lists (doorbells)", c.doorbells),
        ("perf_loop_zero_weight_wrs", "Zero-weight WRs posted", c.zero_weight_wrs),
        ("perf_loop_window_holds", "Times fair admission held a tenant (in-flight budget full)", c.window_holds),
        (
            "perf_loop_admit_idle_visits",
            "Times fair admission visited a tenant and admitted nothing",
            c.admit_idle_visits,
        ),
        ("perf_loop_paced_holds", "Times a QP with work was held by its tenant's pacing", c.paced_holds),
        ("perf_loop_policy_ticks", "Policy ticks", c.ticks),
        ("perf_loop_ticks_put_off", "Policy ticks put off because the last took over 5% of the loop", c.ticks_put_off),
        ("perf_loop_handoffs", "In-NIC hand-offs planned through control QPs", c.handoffs),
        ("perf_loop_cq_overruns", "Overruns of a shared completion queue", c.cq_overruns),
    ];
    for (name, help, v) in loop_counters {
        counters(&mut reg, name, help, [(none(), v)]);
    }
    let secs: [(&str, &str, u64); 2] = [
        ("perf_loop_busy_seconds", "Wall time of rounds that did work or called the policy", c.busy_ns),
        ("perf_loop_policy_seconds", "Wall time in the policy's hooks (part of busy)", c.policy_ns),
    ];
    for (name, help, ns) in secs {
        let family = Family::<Labels, Counter<f64>>::default();
        family.get_or_create(&none()).inc_by(ns as f64 / 1e9);
        reg.register(name, help, family);
    }
    let uptime_family = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    uptime_family.get_or_create(&none()).set(uptime.as_secs_f64());
    reg.register("perf_uptime_seconds", "Seconds since the daemon started", uptime_family);
    let p = &snap.policy_counters;
    let policy = || vec![("policy", snap.policy.clone())];
    counters(&mut reg, "perf_policy_calls", "Calls into the policy's hooks", [(policy(), p.calls)]);
    counters(&mut reg, "perf_policy_rejections", "Policy decisions rejected by validation", [(policy(), p.rejections)]);
    counters(
        &mut reg,
        "perf_policy_traps",
        "Calls into a wasm policy that trapped or timed out",
        [(policy(), p.traps)],
    );
    counters(
        &mut reg,
        "perf_policy_fallbacks",
        "Times a wasm policy was dropped for passthrough",
        [(policy(), p.fallbacks)],
    );
    counters(
        &mut reg,
        "perf_policy_swaps",
        "Policy swaps recorded (accepted or refused)",
        [(policy(), snap.swaps.len() as u64)],
    );

    let tenant = |name: &str| vec![("tenant", name.to_string())];
    counters(
        &mut reg,
        "perf_tenant_delivered",
        "Completions the loop delivered to the tenant",
        snap.tenants.iter().map(|t| (tenant(&t.name), t.delivered)),
    );
    gauges(
        &mut reg,
        "perf_tenant_held",
        "The tenant's requests held in software (queued per QP or being split)",
        snap.tenants.iter().map(|t| (tenant(&t.name), t.held as i64)),
    );
    gauges(
        &mut reg,
        "perf_tenant_paused",
        "1 while the operator has paused the tenant",
        snap.tenants.iter().map(|t| (tenant(&t.name), i64::from(t.paused))),
    );

    gauges(&mut reg, "perf_clients", "Clients connected", [(none(), hub.clients.len() as i64)]);
    counters(&mut reg, "perf_clients_closed", "Clients closed (gone, killed or broken)", [(none(), hub.closed)]);
    counters(&mut reg, "perf_clients_broken", "Clients whose ring the daemon found broken", [(none(), hub.broken)]);
    let rows = |f: fn(&ClientMetrics) -> u64| hub.clients.iter().map(move |m| (tenant(&m.tenant), f(m)));
    counters(&mut reg, "perf_client_requests", "Requests taken from the client's ring", rows(|m| m.taken));
    let outcome = |m: &ClientMetrics, s: &str| vec![("tenant", m.tenant.clone()), ("status", s.to_string())];
    counters(
        &mut reg,
        "perf_client_completions",
        "Completions written to the client's ring, by outcome",
        hub.clients.iter().flat_map(|m| [(outcome(m, "success"), m.ok), (outcome(m, "error"), m.errors)]),
    );
    counters(
        &mut reg,
        "perf_client_bytes",
        "Bytes of the client's successful send-side completions",
        rows(|m| m.bytes),
    );
    let latency = Family::<Labels, LatencyHistogram>::default();
    for m in &hub.clients {
        *latency.get_or_create(&tenant(&m.tenant)).0.lock().unwrap_or_else(|e| e.into_inner()) = m.latency;
    }
    reg.register(
        "perf_client_latency_seconds",
        "The client's completion latencies, taken from its ring to written to it",
        latency,
    );
    gauges(
        &mut reg,
        "perf_client_outstanding",
        "The client's requests taken and not yet completed",
        rows(|m| m.outstanding).map(|(l, v)| (l, v as i64)),
    );
    let mut text = String::new();
    prometheus_text::encode(&mut text, &reg).context("encoding the metrics")?;
    Ok(text)
}
