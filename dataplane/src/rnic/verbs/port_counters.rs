//! A port's traffic counters for the verbs backend: read from sysfs
//! (`/sys/class/infiniband/<dev>/ports/<port>/counters/port_xmit_data` and
//! `port_rcv_data`, in units of 4 bytes) by a sampler thread beside the
//! loop, because a read there is a query to the device (on mlx5, a command
//! to the firmware): far too slow for the loop's tick, which reads the
//! latest sample instead ([`PortSampler::latest`]).
//!
//! Backend-independent: compiled and tested without the `verbs` feature.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::rnic::PortTraffic;

/// How often the sampler reads the counters: well within the pipeline
/// floor's averaging (a quarter weight per 50 us tick), and a few hundred
/// device queries a second at most.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(1);

/// The counters' directory of port `port` of device `dev` under `root`.
pub fn counters_dir(root: &Path, dev: &str, port: u8) -> PathBuf {
    root.join(dev).join("ports").join(port.to_string()).join("counters")
}

/// Reads the bytes port counters directory `dir` says were sent and
/// received (`port_xmit_data`, `port_rcv_data`, counted in 4-byte units).
pub fn read_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    let read = |name: &str| -> std::io::Result<u64> {
        let text = fs::read_to_string(dir.join(name))?;
        let words: u64 = text
            .trim()
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{name}: {e}")))?;
        Ok(words.saturating_mul(4))
    };
    Ok((read("port_xmit_data")?, read("port_rcv_data")?))
}

/// A thread that samples one port's counters every [`SAMPLE_PERIOD`],
/// stamping each sample with the backend's clock (ns since `start`).
/// Stops when dropped.
pub struct PortSampler {
    latest: Arc<Mutex<Option<PortTraffic>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PortSampler {
    /// Starts sampling the counters in `dir`, if they can be read now;
    /// `None` otherwise (no such device or port, or a kernel without the
    /// counters).
    pub fn start(dir: PathBuf, start: Instant) -> Option<PortSampler> {
        read_bytes(&dir).ok()?;
        let latest = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (out, done) = (Arc::clone(&latest), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("port-counters".into())
            .spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if let Ok((xmit_bytes, rcv_bytes)) = read_bytes(&dir) {
                        let at_ns = start.elapsed().as_nanos() as u64;
                        if let Ok(mut l) = out.lock() {
                            *l = Some(PortTraffic { xmit_bytes, rcv_bytes, at_ns });
                        }
                    }
                    std::thread::sleep(SAMPLE_PERIOD);
                }
            })
            .ok()?;
        Some(PortSampler { latest, stop, thread: Some(thread) })
    }

    /// The latest sample, `None` before the first.
    pub fn latest(&self) -> Option<PortTraffic> {
        self.latest.lock().ok().and_then(|l| *l)
    }
}

impl Drop for PortSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("perf-rs-port-counters-{}-{name}", std::process::id()));
        fs::create_dir_all(&dir).expect("fixture dir");
        dir
    }

    #[test]
    fn counters_are_read_in_bytes_from_their_four_byte_units() {
        let root = fixture("read");
        let dir = counters_dir(&root, "mlx5_0", 1);
        assert!(read_bytes(&dir).is_err(), "no counters yet");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("port_xmit_data"), "1000\n").expect("write");
        fs::write(dir.join("port_rcv_data"), "25\n").expect("write");
        assert_eq!(read_bytes(&dir).expect("read"), (4000, 100));
        fs::write(dir.join("port_rcv_data"), "n/a\n").expect("write");
        let e = read_bytes(&dir).expect_err("not a number");
        assert!(e.to_string().contains("port_rcv_data"), "{e}");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn the_sampler_publishes_what_the_counters_say_and_stops_when_dropped() {
        let root = fixture("sampler");
        let dir = counters_dir(&root, "mlx5_0", 1);
        assert!(PortSampler::start(dir.clone(), Instant::now()).is_none(), "no counters: no sampler");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("port_xmit_data"), "10").expect("write");
        fs::write(dir.join("port_rcv_data"), "20").expect("write");
        let sampler = PortSampler::start(dir.clone(), Instant::now()).expect("starts");
        let wait_for = |want: (u64, u64)| {
            for _ in 0..2000 {
                if let Some(t) = sampler.latest() {
                    if (t.xmit_bytes, t.rcv_bytes) == want {
                        return t;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            panic!("no sample of {want:?}: {:?}", sampler.latest());
        };
        let first = wait_for((40, 80));
        fs::write(dir.join("port_xmit_data"), "110").expect("write");
        let second = wait_for((440, 80));
        assert!(second.at_ns > first.at_ns, "each sample carries its time");
        drop(sampler);
        let _ = fs::remove_dir_all(&root);
    }
}
