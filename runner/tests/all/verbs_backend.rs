//! `perf-runner devices` and `perf-runner run --backend verbs` on a machine
//! without a usable RDMA device (every CI machine): `devices` says so and
//! exits 0; `run` fails with one clear error naming the device and what
//! was found, exits non-zero, and never panics. On a machine with devices
//! these cases still hold for a device name that does not exist.

use assert_cmd::Command;

fn bin() -> Command {
    Command::cargo_bin("perf-runner").expect("the perf-runner binary is built")
}

fn scenario() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/b_single-d_single.toml").to_string()
}

#[test]
fn run_on_a_missing_device_fails_clearly() {
    let out = bin()
        .args(["run", &scenario(), "--backend", "verbs", "--device", "perf-rs-no-such-device"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.starts_with("error: --backend verbs --device perf-rs-no-such-device"), "{err}");
    assert!(err.contains("cannot open RDMA device \"perf-rs-no-such-device\"") || err.contains("not found"), "{err}");
}

#[test]
fn backend_flags_that_do_not_fit_are_refused() {
    for (args, says) in [
        (vec!["--backend", "verbs"], "--backend verbs needs --device NAME"),
        (vec!["--device", "rxe0"], "need --backend verbs"),
        (vec!["--backend", "verbs", "--device", "rxe0", "--peer", "h:1", "--serve", "2"], "cannot be used with"),
    ] {
        let out = bin().arg("run").arg(scenario()).args(&args).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn devices_exits_zero_and_says_what_it_found() {
    let out = bin().arg("devices").output().expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.trim().is_empty());
}
