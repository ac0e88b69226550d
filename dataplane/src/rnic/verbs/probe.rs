//! Device discovery for `perf-runner devices`, whatever the build: what the
//! kernel shows in sysfs, what libibverbs lists (only with the `verbs`
//! feature), and which of PeRF's isolation mechanisms run inside the NIC
//! and which the host gates on a given device.
//!
//! Compiled without the `verbs` feature; with it, [`probe`] also asks
//! libibverbs through `list_devices`.

use super::ibv_abi::{GidEntry, GidKind};
use super::sysfs::{self, SysfsReport};
use crate::rnic::sizing::{self, SqModel, MARKER_SLOTS};
use crate::rnic::{DeviceCaps, DeviceInfo, QpCaps};

/// Where an isolation mechanism runs on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Placement {
    /// Executed by the NIC (its send scheduler sees the WQE).
    InNic,
    /// Emulated by the backend: WQEs are held in host memory and posted, or
    /// completed in software, when the condition holds.
    HostGated,
    /// Done by the PeRF-rs dataplane on the host on every backend.
    Host,
}

impl Placement {
    /// A short label.
    pub fn label(self) -> &'static str {
        match self {
            Placement::InNic => "in-NIC",
            Placement::HostGated => "host-gated",
            Placement::Host => "host",
        }
    }
}

/// One isolation mechanism and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IsolationFeature {
    /// The mechanism.
    pub name: &'static str,
    /// Where it runs on this device.
    pub placement: Placement,
    /// What that means.
    pub note: &'static str,
}

/// Where each of PeRF's mechanisms runs on a device with these capabilities.
pub fn isolation_features(caps: &DeviceCaps) -> Vec<IsolationFeature> {
    // The cross-channel mechanisms: (in the NIC?, name, what that does in
    // the NIC, what the backend does on the host instead).
    let cross_channel = [
        (
            caps.cross_channel,
            "WAIT (CQE_WAIT)",
            "the send queue stops at the WQE until the CQ count is reached",
            "the backend holds the rest of the send queue in host memory until it has reaped enough CQEs",
        ),
        (
            caps.cross_channel,
            "SEND_ENABLE",
            "the NIC releases the managed QP's WQEs when it reaches the SEND_ENABLE",
            "executes on the host when every earlier WQE has been posted; completes in software",
        ),
        (
            caps.managed_send,
            "managed send queues (QP pause/resume, PCQ hand-off)",
            "the NIC executes only enabled WQEs",
            "WQEs stay in host memory until a SEND_ENABLE grants credit, then are posted",
        ),
        (
            caps.cross_channel,
            "zero-weight WAIT dummies (message-level weighting)",
            "each dummy takes a turn of the NIC's round-robin scheduler",
            "dummies complete in software and take no NIC scheduler turn: no weighting effect",
        ),
    ];
    let mut v: Vec<IsolationFeature> = cross_channel
        .into_iter()
        .map(|(in_nic, name, nic_note, host_note)| {
            let (placement, note) =
                if in_nic { (Placement::InNic, nic_note) } else { (Placement::HostGated, host_note) };
            IsolationFeature { name, placement, note }
        })
        .collect();
    v.push(IsolationFeature {
        name: "message splitting into sub-requests",
        placement: Placement::Host,
        note: "the dataplane posts large messages as SUB_MSG_SIZE chunks",
    });
    v.push(IsolationFeature {
        name: "tenant classification, QP caps, token buckets",
        placement: Placement::Host,
        note: "the control loop on a dedicated core",
    });
    v.push(IsolationFeature {
        name: "hardware traffic classes (SP / ETS)",
        placement: if caps.traffic_classes > 0 { Placement::InNic } else { Placement::Host },
        note: if caps.traffic_classes > 0 {
            "set per QP (GRH traffic class / SL); the class scheduler is configured outside PeRF-rs (mlnx_qos, dcb)"
        } else {
            "not available on this device"
        },
    });
    v
}

/// One port as libibverbs reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerbsPortReport {
    /// Port number.
    pub num: u8,
    /// State name (`PORT_ACTIVE`, ...).
    pub state: &'static str,
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: &'static str,
    /// Active MTU in bytes.
    pub mtu: Option<u32>,
    /// Link rate in Gb/s.
    pub link_gbps: Option<f64>,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Non-zero GIDs with their types.
    pub gids: Vec<GidEntry>,
    /// The GID index the backend would use (RoCE v2 with IPv4 preferred).
    pub selected_gid: Option<u32>,
}

/// One device as libibverbs reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerbsDeviceReport {
    /// Device name.
    pub name: String,
    /// Transport (`InfiniBand/RoCE`, `iWARP`).
    pub transport: &'static str,
    /// Firmware version.
    pub fw_ver: String,
    /// Capabilities as the backend reports them in `DeviceInfo`.
    pub caps: DeviceCaps,
    /// Largest number of QPs.
    pub max_qp: u32,
    /// Ports.
    pub ports: Vec<VerbsPortReport>,
    /// Why the backend cannot use this device, if it cannot.
    pub unusable: Option<String>,
}

/// What libibverbs said.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum VerbsProbe {
    /// This binary was built without the `verbs` feature.
    NotBuilt,
    /// `ibv_get_device_list` (or opening a device) failed.
    Failed(String),
    /// The devices libibverbs lists (possibly none).
    Devices(Vec<VerbsDeviceReport>),
}

/// Everything `perf-runner devices` reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceProbe {
    /// What sysfs shows.
    pub sysfs: SysfsReport,
    /// What libibverbs lists.
    pub verbs: VerbsProbe,
    /// Whether MLNX_OFED's `ofed_info` is installed.
    pub mlnx_ofed_installed: bool,
}

/// Whether this build has the verbs backend.
pub fn verbs_built() -> bool {
    cfg!(feature = "verbs")
}

/// Looks at this machine.
pub fn probe() -> DeviceProbe {
    DeviceProbe {
        sysfs: sysfs::scan(),
        verbs: verbs_probe(),
        mlnx_ofed_installed: std::path::Path::new("/usr/bin/ofed_info").exists(),
    }
}

#[cfg(feature = "verbs")]
fn verbs_probe() -> VerbsProbe {
    match super::list_devices() {
        Ok(v) => VerbsProbe::Devices(v),
        Err(crate::rnic::RnicError::Device(m)) => VerbsProbe::Failed(m),
        Err(e) => VerbsProbe::Failed(e.to_string()),
    }
}

#[cfg(not(feature = "verbs"))]
fn verbs_probe() -> VerbsProbe {
    VerbsProbe::NotBuilt
}

impl DeviceProbe {
    /// Whether libibverbs lists at least one device.
    pub fn has_verbs_device(&self) -> bool {
        matches!(&self.verbs, VerbsProbe::Devices(v) if !v.is_empty())
    }

    /// What was looked for and what was found, in one paragraph, when no
    /// usable device is present; `None` when libibverbs lists a device.
    pub fn absence_report(&self) -> Option<String> {
        if self.has_verbs_device() {
            return None;
        }
        let s = &self.sysfs;
        let mut lines = Vec::new();
        lines.push("No RDMA device is present.".to_string());
        if !s.root_exists {
            lines.push(format!(
                "- {}: missing (no RDMA core in this kernel, or sysfs not mounted, as in many containers)",
                s.root.display()
            ));
        } else if s.devices.is_empty() {
            lines.push(format!("- {}: exists but lists no device (no RDMA driver bound; try `rdma link add rxe0 type rxe netdev eth0`)", s.root.display()));
        } else {
            let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
            lines.push(format!("- {}: lists {}", s.root.display(), names.join(", ")));
        }
        if s.uverbs.is_empty() {
            lines.push(format!("- {}/uverbs*: none (ib_uverbs not loaded, or not visible here)", sysfs::DEV_ROOT));
        } else {
            lines.push(format!("- {}: {}", sysfs::DEV_ROOT, s.uverbs.join(", ")));
        }
        match &self.verbs {
            VerbsProbe::NotBuilt => lines.push(
                "- libibverbs: not asked: this binary was built without the `verbs` feature (rebuild with `--features perf-dataplane/verbs`)"
                    .into(),
            ),
            VerbsProbe::Failed(e) => lines.push(format!("- libibverbs: {e}")),
            VerbsProbe::Devices(_) => lines.push("- libibverbs: ibv_get_device_list returned 0 devices".into()),
        }
        for p in &s.problems {
            lines.push(format!("- could not read {p}"));
        }
        Some(lines.join("\n"))
    }
}

/// How a first-contact check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CheckLevel {
    /// Fine.
    Ok,
    /// A run works, with less than the defaults (shallower queues, a
    /// smaller MTU) or a guess; the detail says what.
    Warn,
    /// A run would fail.
    Fail,
}

/// One check of `perf-runner doctor`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What was checked (`memlock`, `rxe0 port 1 GID`, ...).
    pub name: String,
    /// The outcome.
    pub level: CheckLevel,
    /// What was found.
    pub detail: String,
    /// What to do about a warning or failure.
    pub fix: Option<String>,
}

impl Check {
    fn new(name: impl Into<String>, level: CheckLevel, detail: impl Into<String>, fix: Option<&str>) -> Check {
        Check { name: name.into(), level, detail: detail.into(), fix: fix.map(str::to_owned) }
    }
}

/// The locked-memory limit (`RLIMIT_MEMLOCK`, soft) from the text of
/// `/proc/self/limits`: `Some(None)` when unlimited, `None` when the line
/// is missing or unreadable.
pub fn parse_memlock(limits: &str) -> Option<Option<u64>> {
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line.trim_start_matches("Max locked memory").split_whitespace().next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

/// This process's locked-memory limit (see [`parse_memlock`]).
pub fn memlock_limit() -> Option<Option<u64>> {
    parse_memlock(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// Bytes a run pins on `dev` for `qps` data QPs with `sq` / `rq` deep
/// queues, twice over in loopback (a second context for the peers), plus
/// `buffers` bytes of registered memory. mlx5 allocates its send and
/// receive rings and CQ rings in user memory and pins them (64 B blocks,
/// rings rounded up to powers of two, 64 B CQEs), so they count against
/// the locked-memory limit; other providers (rxe) keep them in the kernel.
pub fn pinned_bytes(dev: &VerbsDeviceReport, qps: u64, sq: u32, rq: u32, buffers: u64, loopback: bool) -> u64 {
    let rings = match SqModel::of(&dev.caps) {
        SqModel::Mlx5 => {
            let wqe = sizing::mlx5_send_wqe_bytes(&QpCaps::default()) as u64;
            let send = ((sq + MARKER_SLOTS) as u64 * wqe).next_power_of_two();
            let recv = (rq as u64 * 16 * QpCaps::default().max_recv_sge as u64).next_power_of_two();
            let cqes = |n: u64| (n * 64).next_power_of_two();
            qps * (send + recv) + cqes(qps * (sq + MARKER_SLOTS) as u64) + cqes(qps * rq as u64)
        }
        SqModel::Wqes => 0,
    };
    (rings + buffers) * if loopback { 2 } else { 1 }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The first-contact checks of one device for a run with `qps` data QPs
/// at the dataplane's `sq` / `rq` depths.
pub fn device_checks(dev: &VerbsDeviceReport, qps: usize, sq: u32, rq: u32) -> Vec<Check> {
    use CheckLevel::*;
    let mut out = Vec::new();
    let n = &dev.name;
    if let Some(why) = &dev.unusable {
        out.push(Check::new(
            format!("{n}: usable"),
            Fail,
            why.clone(),
            Some("an ACTIVE port with a GID is needed: `ip link set <netdev> up`, an IP address on it (RoCE), `rdma link` (rxe)"),
        ));
    }
    for p in dev.ports.iter().filter(|p| p.active) {
        let name = format!("{n} port {}", p.num);
        let gid = p.selected_gid.and_then(|i| p.gids.iter().find(|g| g.index == i));
        let ethernet = p.link_layer == "Ethernet";
        out.push(match gid {
            None => Check::new(format!("{name}: GID"), Fail, "no usable GID", Some("give the port's network device an IP address")),
            Some(g) if ethernet && g.kind != GidKind::RoceV2 => Check::new(
                format!("{name}: GID"),
                Warn,
                format!("index {} ({}, {}): no RoCE v2 GID, so no routed RoCE", g.index, g.kind.label(), super::ibv_abi::format_gid(&g.gid)),
                Some("check `cat /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/*`; set the type with `cma_roce_mode` or pick one with --gid-index"),
            ),
            Some(g) if ethernet && g.gid[..12] != [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] => Check::new(
                format!("{name}: GID"),
                Warn,
                format!("index {} ({}, {}): no IPv4 address on the port", g.index, g.kind.label(), super::ibv_abi::format_gid(&g.gid)),
                Some("two hosts over IPv4 need an IPv4 address on the port's network device; --gid-index N picks another GID"),
            ),
            Some(g) => Check::new(
                format!("{name}: GID"),
                Ok,
                format!(
                    "index {} ({}, {}) of {}; a two-host run prefers the GID of the address that reaches the peer; --gid-index N overrides",
                    g.index,
                    g.kind.label(),
                    super::ibv_abi::format_gid(&g.gid),
                    p.gids.len()
                ),
                None,
            ),
        });
        out.push(match p.mtu {
            Some(m) if m >= 1024 => Check::new(
                format!("{name}: MTU"),
                Ok,
                format!("{m} B active; a QP uses the smaller of both ends' (exchanged out of band)"),
                None,
            ),
            Some(m) => Check::new(
                format!("{name}: MTU"),
                Warn,
                format!("{m} B active: every message above it is split into packets this small"),
                Some("raise the network device's MTU (RoCE uses the largest of 256..4096 B that fits it: 1500 gives 1024, 9000 gives 4096)"),
            ),
            None => Check::new(format!("{name}: MTU"), Warn, "unknown active MTU", None),
        });
    }
    let caps = &dev.caps;
    let info = DeviceInfo { name: dev.name.clone(), caps: caps.clone() };
    let (fit_sq, fit_rq) = sizing::fit_queue_depths(&info, qps, sq, rq);
    let (model, model_why) = SqModel::of_vendor(dev.caps.vendor);
    let per_qp = sizing::max_send_wr(model, caps.max_qp_wr, &QpCaps::default());
    let slots = match model {
        SqModel::Mlx5 => format!(
            "mlx5 counts 64 B blocks: one WQE (4 SGEs, 220 B inline) takes {} B, so a send queue holds at most {per_qp}",
            sizing::mlx5_send_wqe_bytes(&QpCaps::default())
        ),
        SqModel::Wqes => format!("max_qp_wr {} WQEs per send queue", caps.max_qp_wr),
    };
    out.push(Check::new(
        format!("{n}: send queue"),
        if per_qp >= sq + MARKER_SLOTS { Ok } else { Warn },
        format!("queue model: {model_why}; {slots}; the dataplane asks {sq} + {MARKER_SLOTS} marker slots"),
        (per_qp < sq + MARKER_SLOTS)
            .then_some("the live runner lowers the depth to fit; fewer SGEs or less inline data would allow more"),
    ));
    let fits = fit_sq >= sq && fit_rq >= rq;
    out.push(Check::new(
        format!("{n}: CQ size"),
        if fits { Ok } else { Warn },
        format!(
            "max_cqe {}: {qps} QPs of {sq} + {MARKER_SLOTS} send and {rq} receive entries need {} and {} CQEs on the shared CQs{}",
            caps.max_cqe,
            qps as u64 * (sq + MARKER_SLOTS) as u64,
            qps as u64 * rq as u64,
            if fits { String::new() } else { format!("; the live runner uses {fit_sq} / {fit_rq} deep queues instead") }
        ),
        (!fits).then_some("fewer QPs per run keep the default depths"),
    ));
    out
}

/// The locked-memory check for a run pinning `need` bytes.
pub fn memlock_check(limit: Option<Option<u64>>, need: u64) -> Check {
    use CheckLevel::*;
    let fix = Some(
        "raise it: `ulimit -l unlimited` in the shell (as root, or after raising the hard limit), \
         `memlock` in /etc/security/limits.conf, LimitMEMLOCK= for a systemd unit, --ulimit memlock=-1 for a container",
    );
    match limit {
        None => Check::new("memlock", Warn, "cannot read /proc/self/limits", None),
        Some(None) => Check::new("memlock", Ok, format!("unlimited (a run pins about {})", mib(need)), None),
        Some(Some(l)) if l >= need => {
            Check::new("memlock", Ok, format!("{} locked allowed, a run pins about {}", mib(l), mib(need)), None)
        }
        Some(Some(l)) => Check::new(
            "memlock",
            Fail,
            format!(
                "{} locked allowed, a run pins about {}: reg_mr or create_cq / create_qp would fail with ENOMEM",
                mib(l),
                mib(need)
            ),
            fix,
        ),
    }
}

/// Every first-contact check for this machine: the devices (or the one
/// named), their ports, GIDs, MTU and queue limits for `qps` data QPs at
/// depths `sq` / `rq` with `buffers` bytes registered, and the
/// locked-memory limit against what such a run pins.
pub fn doctor(
    probe: &DeviceProbe,
    device: Option<&str>,
    qps: usize,
    sq: u32,
    rq: u32,
    buffers: u64,
    memlock: Option<Option<u64>>,
) -> Vec<Check> {
    use CheckLevel::*;
    let mut out = Vec::new();
    let devices: Vec<&VerbsDeviceReport> = match &probe.verbs {
        VerbsProbe::NotBuilt => {
            out.push(Check::new(
                "verbs backend",
                Fail,
                "this binary was built without the `verbs` feature, so it cannot use a device",
                Some("rebuild: .ci/verbs-deps.sh, then cargo build --release -p perf-runner --features perf-dataplane/verbs"),
            ));
            Vec::new()
        }
        VerbsProbe::Failed(e) => {
            out.push(Check::new("libibverbs", Fail, e.clone(), Some("see `perf-runner devices` and docs/hardware.md")));
            Vec::new()
        }
        VerbsProbe::Devices(v) => v.iter().filter(|d| device.is_none_or(|n| d.name == n)).collect(),
    };
    if devices.is_empty() && !matches!(probe.verbs, VerbsProbe::NotBuilt) {
        let what = device.map_or_else(|| "no RDMA device".to_string(), |n| format!("no device named {n:?}"));
        let found = probe.absence_report().unwrap_or_else(|| "libibverbs lists other devices".into());
        out.push(Check::new(
            "device",
            Fail,
            format!("{what}\n{found}"),
            Some("Soft-RoCE on any Linux host: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0"),
        ));
    }
    let mut need = buffers;
    for d in &devices {
        out.extend(device_checks(d, qps, sq, rq));
        let info = DeviceInfo { name: d.name.clone(), caps: d.caps.clone() };
        let (fsq, frq) = sizing::fit_queue_depths(&info, qps, sq, rq);
        need = need.max(pinned_bytes(d, qps as u64, fsq, frq, buffers, true));
    }
    out.push(memlock_check(memlock, need));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn caps(cross_channel: bool) -> DeviceCaps {
        DeviceCaps {
            cross_channel,
            managed_send: cross_channel,
            max_qp_wr: 1,
            max_cqe: 1,
            max_inline_data: 0,
            traffic_classes: 8,
            max_rd_atomic: 16,
            vendor: (0, 0),
        }
    }

    #[test]
    fn upstream_devices_gate_the_cross_channel_features_on_the_host() {
        let f = isolation_features(&caps(false));
        for name in ["WAIT (CQE_WAIT)", "SEND_ENABLE", "managed send queues (QP pause/resume, PCQ hand-off)"] {
            let row = f.iter().find(|r| r.name == name).expect(name);
            assert_eq!(row.placement, Placement::HostGated, "{name}");
        }
        let dummies = f.iter().find(|r| r.name.starts_with("zero-weight")).expect("dummies row");
        assert!(dummies.note.contains("no NIC scheduler turn"));
        let split = f.iter().find(|r| r.name.starts_with("message splitting")).expect("split row");
        assert_eq!(split.placement, Placement::Host);
        let tc = f.iter().find(|r| r.name.starts_with("hardware traffic")).expect("tc row");
        assert_eq!(tc.placement, Placement::InNic);
    }

    #[test]
    fn cross_channel_devices_run_them_in_the_nic() {
        let f = isolation_features(&caps(true));
        assert!(f.iter().filter(|r| r.placement == Placement::HostGated).count() == 0);
        assert_eq!(f.iter().filter(|r| r.placement == Placement::InNic).count(), 5);
        assert_eq!(Placement::HostGated.label(), "host-gated");
    }

    fn empty_sysfs(exists: bool) -> SysfsReport {
        SysfsReport {
            root: PathBuf::from("/sys/class/infiniband"),
            root_exists: exists,
            devices: Vec::new(),
            uverbs: Vec::new(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn absence_report_says_what_was_looked_for() {
        let p = DeviceProbe { sysfs: empty_sysfs(false), verbs: VerbsProbe::NotBuilt, mlnx_ofed_installed: false };
        let r = p.absence_report().expect("no device");
        assert!(r.contains("/sys/class/infiniband: missing"), "{r}");
        assert!(r.contains("uverbs*: none"), "{r}");
        assert!(r.contains("without the `verbs` feature"), "{r}");
        let p = DeviceProbe {
            sysfs: empty_sysfs(true),
            verbs: VerbsProbe::Devices(Vec::new()),
            mlnx_ofed_installed: false,
        };
        let r = p.absence_report().expect("no device");
        assert!(r.contains("lists no device"), "{r}");
        assert!(r.contains("ibv_get_device_list returned 0 devices"), "{r}");
        let p = DeviceProbe {
            sysfs: empty_sysfs(false),
            verbs: VerbsProbe::Failed("ibv_get_device_list failed: errno 38".into()),
            mlnx_ofed_installed: false,
        };
        assert!(p.absence_report().expect("no device").contains("errno 38"));
    }

    #[test]
    fn a_listed_device_means_no_absence_report() {
        let dev = VerbsDeviceReport {
            name: "rxe0".into(),
            transport: "InfiniBand/RoCE",
            fw_ver: String::new(),
            caps: caps(false),
            max_qp: 1,
            ports: Vec::new(),
            unusable: None,
        };
        let p =
            DeviceProbe { sysfs: empty_sysfs(true), verbs: VerbsProbe::Devices(vec![dev]), mlnx_ofed_installed: false };
        assert!(p.has_verbs_device());
        assert_eq!(p.absence_report(), None);
    }

    fn port(mtu: u32, gids: Vec<GidEntry>) -> VerbsPortReport {
        let selected_gid = crate::rnic::verbs::ibv_abi::select_gid(&gids, true).map(|g| g.index);
        VerbsPortReport {
            num: 1,
            state: "PORT_ACTIVE",
            active: true,
            link_layer: "Ethernet",
            mtu: Some(mtu),
            link_gbps: Some(100.0),
            lid: 0,
            gids,
            selected_gid,
        }
    }

    fn gid(index: u32, text: &str, kind: GidKind) -> GidEntry {
        GidEntry { index, gid: crate::rnic::verbs::ibv_abi::parse_gid(text).expect("gid"), kind }
    }

    fn device(name: &str, max_qp_wr: u32, max_cqe: u32, ports: Vec<VerbsPortReport>) -> VerbsDeviceReport {
        VerbsDeviceReport {
            name: name.into(),
            transport: "InfiniBand/RoCE",
            fw_ver: String::new(),
            // A ConnectX-6's ids for an `mlx5_*` name, none for others.
            caps: DeviceCaps {
                max_qp_wr,
                max_cqe,
                vendor: if name.starts_with("mlx5") { (0x02c9, 0x101b) } else { (0, 0) },
                ..caps(false)
            },
            max_qp: 1 << 17,
            ports,
            unusable: None,
        }
    }

    fn level(checks: &[Check], name: &str) -> CheckLevel {
        checks.iter().find(|c| c.name.ends_with(name)).unwrap_or_else(|| panic!("no check {name}: {checks:?}")).level
    }

    #[test]
    fn memlock_limits_parse() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max locked memory         8388608              8388608              bytes     \n";
        assert_eq!(parse_memlock(text), Some(Some(8 << 20)));
        let unlimited = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock(unlimited), Some(None));
        assert_eq!(parse_memlock("Max open files 1024 1024 files\n"), None);
        assert!(memlock_limit().is_some(), "this Linux host has /proc/self/limits");
    }

    #[test]
    fn doctor_on_a_connectx_with_the_default_memlock() {
        let gids = vec![gid(0, "fe80::1", GidKind::IbRoceV1), gid(3, "::ffff:10.0.0.5", GidKind::RoceV2)];
        let cx6 = device("mlx5_0", 32768, 4_194_303, vec![port(4096, gids)]);
        let probe = DeviceProbe {
            sysfs: empty_sysfs(true),
            verbs: VerbsProbe::Devices(vec![cx6.clone()]),
            mlnx_ofed_installed: false,
        };
        // 8 QPs of 2048 + 2 send slots of 448 B: 1 MiB send rings each, in two contexts.
        let need = pinned_bytes(&cx6, 8, 2048, 1024, 0, true);
        assert!(need > 16 << 20, "{need}");
        let checks = doctor(&probe, None, 8, 2048, 1024, 0, Some(Some(8 << 20)));
        assert_eq!(level(&checks, "memlock"), CheckLevel::Fail, "{checks:#?}");
        let m = checks.iter().find(|c| c.name == "memlock").expect("memlock");
        assert!(m.fix.as_deref().is_some_and(|f| f.contains("ulimit -l")), "{m:?}");
        assert_eq!(level(&checks, "port 1: GID"), CheckLevel::Ok);
        assert_eq!(level(&checks, "port 1: MTU"), CheckLevel::Ok);
        assert_eq!(level(&checks, "send queue"), CheckLevel::Ok);
        assert_eq!(level(&checks, "CQ size"), CheckLevel::Ok);
        let checks = doctor(&probe, Some("mlx5_0"), 8, 2048, 1024, 0, Some(None));
        assert!(checks.iter().all(|c| c.level == CheckLevel::Ok), "{checks:#?}");
        // A deeper send queue than mlx5's blocks allow is reported.
        let checks = doctor(&probe, None, 1, 8192, 1024, 0, Some(None));
        let sq = checks.iter().find(|c| c.name.ends_with("send queue")).expect("sq");
        assert_eq!(sq.level, CheckLevel::Warn);
        assert!(sq.detail.contains("448 B") && sq.detail.contains("4681"), "{sq:?}");
        // It says which queue model it chose and why: by the device's ids.
        assert!(sq.detail.contains("queue model: vendor 0x02c9 part 4123") && sq.detail.contains("mlx5"), "{sq:?}");
    }

    #[test]
    fn doctor_on_rxe_with_many_qps_and_a_1500_b_interface() {
        let gids = vec![gid(0, "fe80::2", GidKind::IbRoceV1), gid(1, "fe80::2", GidKind::RoceV2)];
        let rxe = device("rxe0", 16383, 32767, vec![port(1024, gids.clone())]);
        let probe = DeviceProbe {
            sysfs: empty_sysfs(true),
            verbs: VerbsProbe::Devices(vec![rxe.clone()]),
            mlnx_ofed_installed: false,
        };
        let checks = doctor(&probe, None, 64, 2048, 1024, 1 << 20, Some(Some(8 << 20)));
        assert_eq!(level(&checks, "CQ size"), CheckLevel::Warn, "64 x 2050 > 32767");
        let cq = checks.iter().find(|c| c.name.ends_with("CQ size")).expect("cq");
        assert!(cq.detail.contains("256 / 256"), "{cq:?}");
        assert_eq!(level(&checks, "port 1: GID"), CheckLevel::Warn, "link-local only: no IPv4 address");
        assert_eq!(level(&checks, "port 1: MTU"), CheckLevel::Ok);
        assert_eq!(level(&checks, "memlock"), CheckLevel::Ok, "rxe pins only the buffers");
        assert_eq!(pinned_bytes(&rxe, 64, 256, 256, 1 << 20, true), 2 << 20);
        let small = device("rxe0", 16383, 32767, vec![port(512, gids)]);
        assert_eq!(level(&device_checks(&small, 1, 2048, 1024), "port 1: MTU"), CheckLevel::Warn);
        let mut dead = rxe.clone();
        dead.unusable = Some("no port is ACTIVE".into());
        dead.ports.clear();
        assert_eq!(level(&device_checks(&dead, 1, 2048, 1024), "usable"), CheckLevel::Fail);
    }

    #[test]
    fn doctor_without_a_device_or_the_backend_fails() {
        let none = DeviceProbe {
            sysfs: empty_sysfs(false),
            verbs: VerbsProbe::Devices(Vec::new()),
            mlnx_ofed_installed: false,
        };
        let checks = doctor(&none, None, 8, 2048, 1024, 0, Some(None));
        let d = checks.iter().find(|c| c.name == "device").expect("device check");
        assert_eq!(d.level, CheckLevel::Fail);
        assert!(d.detail.contains("No RDMA device"), "{d:?}");
        let named = doctor(&none, Some("mlx5_3"), 8, 2048, 1024, 0, Some(None));
        assert!(named.iter().any(|c| c.detail.contains("\"mlx5_3\"")), "{named:?}");
        let unbuilt =
            DeviceProbe { sysfs: empty_sysfs(false), verbs: VerbsProbe::NotBuilt, mlnx_ofed_installed: false };
        let checks = doctor(&unbuilt, None, 8, 2048, 1024, 0, Some(None));
        assert_eq!(checks[0].level, CheckLevel::Fail);
        assert!(checks[0].fix.as_deref().is_some_and(|f| f.contains("--features perf-dataplane/verbs")));
    }

    #[test]
    fn probing_this_machine_does_not_fail() {
        let p = probe();
        assert_eq!(matches!(p.verbs, VerbsProbe::NotBuilt), !verbs_built());
        if !p.has_verbs_device() {
            assert!(p.absence_report().is_some());
        }
    }
}
