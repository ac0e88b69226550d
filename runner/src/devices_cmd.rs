//! `perf-runner devices`: the RDMA devices of this machine (from libibverbs
//! when built with `--features perf-dataplane/verbs`, else from sysfs), their
//! ports, link state and GIDs, and which of PeRF's isolation mechanisms run
//! in the NIC and which the verbs backend gates on the host. Without a
//! device it says plainly what was looked for, and exits 0.

use std::fmt::Write as _;

use perf_dataplane::rnic::verbs::ibv_abi::format_gid;
use perf_dataplane::rnic::verbs::probe::{self, isolation_features, DeviceProbe, VerbsDeviceReport, VerbsProbe};
use perf_dataplane::rnic::verbs::sysfs::SysfsDevice;

/// Flags of `devices`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the whole probe as JSON.
    #[arg(long)]
    json: bool,
}

/// Probes and prints.
pub fn run(a: Args) -> anyhow::Result<()> {
    let p = probe::probe();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}", render(&p));
    }
    Ok(())
}

fn render_verbs_device(out: &mut String, d: &VerbsDeviceReport) {
    let _ = writeln!(
        out,
        "\n{}  ({}, fw {}, vendor 0x{:x} part 0x{:x})",
        d.name, d.transport, d.fw_ver, d.caps.vendor.0, d.caps.vendor.1
    );
    match &d.unusable {
        None => {
            let _ = writeln!(out, "  usable by the verbs backend: yes");
        }
        Some(why) => {
            let _ = writeln!(out, "  usable by the verbs backend: no: {why}");
        }
    }
    let c = &d.caps;
    let _ = writeln!(
        out,
        "  limits: max_qp {}, max_qp_wr {}, max_cqe {}, max inline {} B, traffic classes {}",
        d.max_qp, c.max_qp_wr, c.max_cqe, c.max_inline_data, c.traffic_classes
    );
    for p in &d.ports {
        let mtu = p.mtu.map_or_else(|| "?".into(), |m| m.to_string());
        let rate = p.link_gbps.map_or_else(|| "?".into(), |g| format!("{g}"));
        let _ = writeln!(out, "  port {}: {}, {}, MTU {mtu}, {rate} Gb/s, LID {}", p.num, p.state, p.link_layer, p.lid);
        if p.gids.is_empty() {
            let _ = writeln!(out, "    no GID (on RoCE the network device needs an IP address)");
        }
        for g in &p.gids {
            let mark = if p.selected_gid == Some(g.index) { "  <- used" } else { "" };
            let _ = writeln!(out, "    GID {:>3}  {:<40} {}{mark}", g.index, format_gid(&g.gid), g.kind.label());
        }
    }
    let _ = writeln!(out, "  isolation mechanisms on this device:");
    for f in isolation_features(&d.caps) {
        let _ = writeln!(out, "    {:<11} {}: {}", f.placement.label(), f.name, f.note);
    }
}

fn render_sysfs_device(out: &mut String, d: &SysfsDevice) {
    let kind = d.node_type.as_deref().unwrap_or("?");
    let _ = writeln!(out, "\n{}  (node type {kind}, fw {})", d.name, d.fw_ver.as_deref().unwrap_or("?"));
    for p in &d.ports {
        let _ = writeln!(
            out,
            "  port {}: {}, {}, {}",
            p.num,
            p.state.as_deref().unwrap_or("?"),
            p.link_layer.as_deref().unwrap_or("?"),
            p.rate.as_deref().unwrap_or("?")
        );
        for g in &p.gids {
            let _ = writeln!(out, "    GID {:>3}  {:<40} {}", g.index, format_gid(&g.gid), g.kind.label());
        }
    }
}

/// The text report.
fn render(p: &DeviceProbe) -> String {
    let mut out = String::new();
    if let VerbsProbe::Devices(devs) = &p.verbs {
        if !devs.is_empty() {
            let _ = writeln!(
                out,
                "libibverbs lists {} RDMA device(s). Library: upstream rdma-core verbs (no cross-channel verbs){}.",
                devs.len(),
                if p.mlnx_ofed_installed {
                    "; MLNX_OFED is installed, but this backend does not use its experimental verbs"
                } else {
                    ""
                }
            );
            for d in devs {
                render_verbs_device(&mut out, d);
            }
            let _ = writeln!(
                out,
                "\nhost-gated: the verbs backend holds WQEs in host memory and posts them (or completes WAIT / SEND_ENABLE / NOP in software) when the condition holds; see docs/hardware.md."
            );
            return out;
        }
    }
    if let Some(why) = p.absence_report() {
        out.push_str(&why);
        out.push('\n');
    }
    if !p.sysfs.devices.is_empty() {
        let _ = writeln!(out, "\nThe kernel shows these devices, which this binary cannot use:");
        for d in &p.sysfs.devices {
            render_sysfs_device(&mut out, d);
        }
    }
    let _ = writeln!(
        out,
        "\nThe simulated NIC (`perf-runner run`, profile cx6-100g) is always available; it models WAIT, SEND_ENABLE and managed QPs in the NIC."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_dataplane::rnic::verbs::ibv_abi::{parse_gid, GidEntry, GidKind};
    use perf_dataplane::rnic::verbs::probe::VerbsPortReport;
    use perf_dataplane::rnic::verbs::sysfs::SysfsReport;
    use perf_dataplane::rnic::DeviceCaps;
    use std::path::PathBuf;

    fn sysfs(exists: bool, devices: Vec<SysfsDevice>) -> SysfsReport {
        SysfsReport {
            root: PathBuf::from("/sys/class/infiniband"),
            root_exists: exists,
            devices,
            uverbs: Vec::new(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn no_device_is_said_plainly() {
        let p =
            DeviceProbe { sysfs: sysfs(false, Vec::new()), verbs: VerbsProbe::NotBuilt, mlnx_ofed_installed: false };
        let text = render(&p);
        assert!(text.starts_with("No RDMA device is present."), "{text}");
        assert!(text.contains("/sys/class/infiniband: missing"), "{text}");
        assert!(text.contains("built without the `verbs` feature"), "{text}");
    }

    #[test]
    fn sysfs_devices_without_verbs_are_listed() {
        let dev = SysfsDevice {
            name: "rxe0".into(),
            node_type: Some("1: CA".into()),
            node_guid: None,
            fw_ver: None,
            hca_type: None,
            ports: Vec::new(),
        };
        let p = DeviceProbe { sysfs: sysfs(true, vec![dev]), verbs: VerbsProbe::NotBuilt, mlnx_ofed_installed: false };
        let text = render(&p);
        assert!(text.contains("lists rxe0"), "{text}");
        assert!(text.contains("cannot use"), "{text}");
    }

    #[test]
    fn a_device_shows_ports_gids_and_placement() {
        let gid = parse_gid("::ffff:10.0.0.5").expect("gid");
        let port = VerbsPortReport {
            num: 1,
            state: "PORT_ACTIVE",
            active: true,
            link_layer: "Ethernet",
            mtu: Some(1024),
            link_gbps: Some(10.0),
            lid: 0,
            gids: vec![GidEntry { index: 1, gid, kind: GidKind::RoceV2 }],
            selected_gid: Some(1),
        };
        let dev = VerbsDeviceReport {
            name: "rxe0".into(),
            transport: "InfiniBand/RoCE",
            fw_ver: "0.0.0".into(),
            caps: DeviceCaps {
                cross_channel: false,
                managed_send: false,
                max_qp_wr: 1024,
                max_cqe: 4096,
                max_inline_data: 256,
                traffic_classes: 0,
                max_rd_atomic: 16,
                vendor: (0xffffff, 0),
            },
            max_qp: 64,
            ports: vec![port],
            unusable: None,
        };
        let p = DeviceProbe {
            sysfs: sysfs(true, Vec::new()),
            verbs: VerbsProbe::Devices(vec![dev]),
            mlnx_ofed_installed: false,
        };
        let text = render(&p);
        assert!(text.contains("port 1: PORT_ACTIVE, Ethernet, MTU 1024, 10 Gb/s"), "{text}");
        assert!(text.contains("::ffff:10.0.0.5") && text.contains("RoCE v2  <- used"), "{text}");
        assert!(text.contains("host-gated  WAIT (CQE_WAIT)"), "{text}");
        assert!(!text.contains("No RDMA device"), "{text}");
    }
}
