//! Device discovery for `perf-runner devices`, whatever the build: what the
//! kernel shows in sysfs, what libibverbs lists (only with the `verbs`
//! feature), and which of PeRF's isolation mechanisms run inside the NIC
//! and which the host gates on a given device.
//!
//! Compiled without the `verbs` feature; with it, [`probe`] also asks
//! libibverbs through [`super::verbs::list_devices`].

use super::ibv_abi::GidEntry;
use super::sysfs::{self, SysfsReport};
use super::DeviceCaps;

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
    let xc = |in_nic: bool, nic_note: &'static str, host_note: &'static str| {
        if in_nic {
            (Placement::InNic, nic_note)
        } else {
            (Placement::HostGated, host_note)
        }
    };
    let mut v = Vec::new();
    let (placement, note) = xc(
        caps.cross_channel,
        "the send queue stops at the WQE until the CQ count is reached",
        "the backend holds the rest of the send queue in host memory until it has reaped enough CQEs",
    );
    v.push(IsolationFeature { name: "WAIT (CQE_WAIT)", placement, note });
    let (placement, note) = xc(
        caps.cross_channel,
        "the NIC releases the managed QP's WQEs when it reaches the SEND_ENABLE",
        "executes on the host when every earlier WQE has been posted; completes in software",
    );
    v.push(IsolationFeature { name: "SEND_ENABLE", placement, note });
    let (placement, note) = xc(
        caps.managed_send,
        "the NIC executes only enabled WQEs",
        "WQEs stay in host memory until a SEND_ENABLE grants credit, then are posted",
    );
    v.push(IsolationFeature { name: "managed send queues (QP pause/resume, PCQ hand-off)", placement, note });
    let (placement, note) = xc(
        caps.cross_channel,
        "each dummy takes a turn of the NIC's round-robin scheduler",
        "dummies complete in software and take no NIC scheduler turn: no weighting effect",
    );
    v.push(IsolationFeature { name: "zero-weight WAIT dummies (message-level weighting)", placement, note });
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
    /// PCI vendor and part id.
    pub vendor: (u32, u32),
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
    match super::verbs::list_devices() {
        Ok(v) => VerbsProbe::Devices(v),
        Err(super::RnicError::Device(m)) => VerbsProbe::Failed(m),
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
            vendor: (0, 0),
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

    #[test]
    fn probing_this_machine_does_not_fail() {
        let p = probe();
        assert_eq!(matches!(p.verbs, VerbsProbe::NotBuilt), !verbs_built());
        if !p.has_verbs_device() {
            assert!(p.absence_report().is_some());
        }
    }
}
