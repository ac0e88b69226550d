//! What the kernel says about RDMA devices, read from sysfs
//! (`/sys/class/infiniband/<dev>/...`) and `/dev/infiniband`, without
//! libibverbs. It tells `perf-runner devices` what is present on a machine
//! whatever the build, and gives the verbs backend the GID types (RoCE v1 or
//! v2) that upstream libibverbs has no stable call for.
//!
//! Backend-independent: compiled and tested without the `verbs` feature.

use std::fs;
use std::path::{Path, PathBuf};

use super::ibv_abi::{parse_gid, GidEntry, GidKind};

/// Where the kernel lists RDMA devices.
pub const SYSFS_ROOT: &str = "/sys/class/infiniband";
/// Where the uverbs character devices live.
pub const DEV_ROOT: &str = "/dev/infiniband";

/// One port as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SysfsPort {
    /// Port number (from 1).
    pub num: u8,
    /// `state`, e.g. `4: ACTIVE`.
    pub state: Option<String>,
    /// `phys_state`, e.g. `5: LinkUp`.
    pub phys_state: Option<String>,
    /// `rate`, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    /// `link_layer`: `Ethernet` or `InfiniBand`.
    pub link_layer: Option<String>,
    /// Non-zero GID table entries with their types.
    pub gids: Vec<GidEntry>,
    /// Network devices of the GID entries (`gid_attrs/ndevs`), deduplicated.
    pub netdevs: Vec<String>,
}

impl SysfsPort {
    /// Whether the port state is ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state.as_deref().is_some_and(|s| s.contains("ACTIVE"))
    }
}

/// One RDMA device as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SysfsDevice {
    /// Device name (`mlx5_0`, `rxe0`, `siw0`).
    pub name: String,
    /// `node_type`, e.g. `1: CA` or `4: RNIC` (iWARP).
    pub node_type: Option<String>,
    /// `node_guid`.
    pub node_guid: Option<String>,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `hca_type` / board id, when the driver provides one.
    pub hca_type: Option<String>,
    /// Ports, in order.
    pub ports: Vec<SysfsPort>,
}

impl SysfsDevice {
    /// Whether this is an iWARP device (siw, Chelsio, ...), whose RC QPs
    /// are connected through rdma_cm rather than by `ibv_modify_qp`.
    pub fn is_iwarp(&self) -> bool {
        self.node_type.as_deref().is_some_and(|t| t.contains("RNIC"))
    }
}

/// Everything found under the sysfs root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SysfsReport {
    /// The directory looked at.
    pub root: PathBuf,
    /// Whether it exists (no: the kernel has no RDMA core loaded, or sysfs
    /// is not mounted, as in many containers).
    pub root_exists: bool,
    /// Devices found.
    pub devices: Vec<SysfsDevice>,
    /// uverbs character devices under `/dev/infiniband` (what libibverbs opens).
    pub uverbs: Vec<String>,
    /// Entries that could not be read, with the reason.
    pub problems: Vec<String>,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

fn sorted_names(dir: &Path) -> Result<Vec<String>, std::io::Error> {
    let mut v: Vec<String> =
        fs::read_dir(dir)?.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    Ok(v)
}

/// The non-zero GID entries of one port, with their types.
pub fn read_gids(port_dir: &Path) -> Vec<GidEntry> {
    let Ok(names) = sorted_names(&port_dir.join("gids")) else { return Vec::new() };
    names
        .iter()
        .filter_map(|n| {
            let index: u32 = n.parse().ok()?;
            let gid = parse_gid(&read_trim(&port_dir.join("gids").join(n))?)?;
            if gid == [0u8; 16] {
                return None;
            }
            let kind = read_trim(&port_dir.join("gid_attrs/types").join(n))
                .map_or(GidKind::Unknown, |t| GidKind::from_sysfs(&t));
            Some(GidEntry { index, gid, kind })
        })
        .collect()
}

fn read_port(port_dir: &Path, num: u8) -> SysfsPort {
    let gids = read_gids(port_dir);
    let mut netdevs: Vec<String> =
        gids.iter().filter_map(|g| read_trim(&port_dir.join("gid_attrs/ndevs").join(g.index.to_string()))).collect();
    netdevs.sort();
    netdevs.dedup();
    SysfsPort {
        num,
        state: read_trim(&port_dir.join("state")),
        phys_state: read_trim(&port_dir.join("phys_state")),
        rate: read_trim(&port_dir.join("rate")),
        link_layer: read_trim(&port_dir.join("link_layer")),
        gids,
        netdevs,
    }
}

/// Reads one device directory.
pub fn read_device(dev_dir: &Path, name: &str) -> SysfsDevice {
    let ports = sorted_names(&dev_dir.join("ports"))
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.parse::<u8>().ok())
        .map(|num| read_port(&dev_dir.join("ports").join(num.to_string()), num))
        .collect();
    SysfsDevice {
        name: name.to_owned(),
        node_type: read_trim(&dev_dir.join("node_type")),
        node_guid: read_trim(&dev_dir.join("node_guid")),
        fw_ver: read_trim(&dev_dir.join("fw_ver")),
        hca_type: read_trim(&dev_dir.join("hca_type")).or_else(|| read_trim(&dev_dir.join("board_id"))),
        ports,
    }
}

/// Scans a sysfs root (normally [`SYSFS_ROOT`]) and a device root
/// (normally [`DEV_ROOT`]).
pub fn scan_at(root: &Path, dev_root: &Path) -> SysfsReport {
    let mut problems = Vec::new();
    let root_exists = root.is_dir();
    let devices = if root_exists {
        match sorted_names(root) {
            Ok(names) => names.iter().map(|n| read_device(&root.join(n), n)).collect(),
            Err(e) => {
                problems.push(format!("{}: {e}", root.display()));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let uverbs = match sorted_names(dev_root) {
        Ok(v) => v.into_iter().filter(|n| n.starts_with("uverbs")).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            problems.push(format!("{}: {e}", dev_root.display()));
            Vec::new()
        }
    };
    SysfsReport { root: root.to_owned(), root_exists, devices, uverbs, problems }
}

/// Scans this machine.
pub fn scan() -> SysfsReport {
    scan_at(Path::new(SYSFS_ROOT), Path::new(DEV_ROOT))
}

/// The GID table of `device` port `port` on this machine.
pub fn device_gids(device: &str, port: u8) -> Vec<GidEntry> {
    read_gids(&Path::new(SYSFS_ROOT).join(device).join("ports").join(port.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Fixture(PathBuf);

    impl Fixture {
        fn new() -> Fixture {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "perf-rs-sysfs-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&p).expect("fixture dir");
            Fixture(p)
        }

        fn file(&self, rel: &str, text: &str) {
            let p = self.0.join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, text).expect("write");
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn missing_root_is_reported_not_an_error() {
        let f = Fixture::new();
        let r = scan_at(&f.0.join("nope"), &f.0.join("nodev"));
        assert!(!r.root_exists);
        assert!(r.devices.is_empty() && r.uverbs.is_empty() && r.problems.is_empty());
    }

    #[test]
    fn reads_a_soft_roce_device() {
        let f = Fixture::new();
        let port = "ib/rxe0/ports/1";
        f.file("ib/rxe0/node_type", "1: CA\n");
        f.file("ib/rxe0/node_guid", "5054:00ff:fe12:3456\n");
        f.file("ib/rxe0/fw_ver", "0.0.0\n");
        f.file(&format!("{port}/state"), "4: ACTIVE\n");
        f.file(&format!("{port}/phys_state"), "5: LinkUp\n");
        f.file(&format!("{port}/rate"), "10 Gb/sec (1X QDR)\n");
        f.file(&format!("{port}/link_layer"), "Ethernet\n");
        f.file(&format!("{port}/gids/0"), "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
        f.file(&format!("{port}/gids/1"), "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
        f.file(&format!("{port}/gids/2"), "0000:0000:0000:0000:0000:ffff:0a00:0005\n");
        f.file(&format!("{port}/gids/3"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
        f.file(&format!("{port}/gids/10"), "0000:0000:0000:0000:0000:ffff:0a00:0005\n");
        f.file(&format!("{port}/gid_attrs/types/0"), "IB/RoCE v1\n");
        f.file(&format!("{port}/gid_attrs/types/1"), "RoCE v2\n");
        f.file(&format!("{port}/gid_attrs/types/2"), "IB/RoCE v1\n");
        f.file(&format!("{port}/gid_attrs/types/10"), "RoCE v2\n");
        f.file(&format!("{port}/gid_attrs/ndevs/0"), "eth0\n");
        f.file(&format!("{port}/gid_attrs/ndevs/10"), "eth0\n");
        f.file("dev/uverbs0", "");
        f.file("dev/rdma_cm", "");
        let r = scan_at(&f.0.join("ib"), &f.0.join("dev"));
        assert!(r.root_exists);
        assert_eq!(r.uverbs, vec!["uverbs0".to_string()]);
        assert_eq!(r.devices.len(), 1);
        let d = &r.devices[0];
        assert_eq!(d.name, "rxe0");
        assert!(!d.is_iwarp());
        let p = &d.ports[0];
        assert_eq!(p.num, 1);
        assert!(p.is_active());
        assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
        assert_eq!(p.rate.as_deref(), Some("10 Gb/sec (1X QDR)"));
        let idx: Vec<u32> = p.gids.iter().map(|g| g.index).collect();
        assert_eq!(idx, vec![0, 1, 2, 10], "numeric order, zero GID skipped");
        assert_eq!(p.gids[1].kind, GidKind::RoceV2);
        assert_eq!(p.netdevs, vec!["eth0".to_string()]);
        let chosen = crate::rnic::verbs::ibv_abi::select_gid(&p.gids, true).map(|g| g.index);
        assert_eq!(chosen, Some(10), "RoCE v2 with an IPv4 address");
    }

    #[test]
    fn iwarp_devices_are_recognised() {
        let f = Fixture::new();
        f.file("ib/siw0/node_type", "4: RNIC\n");
        f.file("ib/siw0/ports/1/state", "1: DOWN\n");
        let r = scan_at(&f.0.join("ib"), &f.0.join("dev"));
        assert!(r.devices[0].is_iwarp());
        assert!(!r.devices[0].ports[0].is_active());
        assert!(r.devices[0].ports[0].gids.is_empty());
    }
}
