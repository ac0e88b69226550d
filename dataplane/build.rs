//! Builds the repository's own policy crates (`policies/*`) for
//! `wasm32-unknown-unknown` so that the dataplane can embed them
//! (`policy::wasm::embedded`): a nested `cargo build --release --target
//! wasm32-unknown-unknown` into a target directory under `OUT_DIR`, so it
//! never contends with the outer build's directory lock. The toolchain
//! file pins the wasm32 target, so this needs no extra command. If the
//! nested build fails (no wasm32 target, say), the dataplane still builds
//! with empty modules and a warning; `embedded::*` then returns `None`.

use std::path::PathBuf;
use std::process::Command;

const POLICIES: &[(&str, &str)] = &[
    ("perf-policy-perf", "perf_policy_perf"),
    ("perf-policy-passthrough", "perf_policy_passthrough"),
    ("perf-policy-justitia", "perf_policy_justitia"),
    ("perf-policy-weighted", "perf_policy_weighted"),
    ("perf-policy-slo", "perf_policy_slo"),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("dataplane/ lives in the workspace root").to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", root.join("policies").display());
    println!("cargo:rerun-if-changed={}", root.join("policy-sdk").display());
    println!("cargo:rerun-if-changed=build.rs");

    let target_dir = out.join("policies-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--config", "profile.release.debug=0"])
        .arg("--target-dir")
        .arg(&target_dir);
    for (pkg, _) in POLICIES {
        cmd.args(["-p", pkg]);
    }
    // Do not hand the outer build's wrappers and flags (clippy, coverage,
    // native RUSTFLAGS) to the wasm build.
    for var in [
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CLIPPY_ARGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let ok = match cmd.status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            println!("cargo:warning=building policies/* for wasm32-unknown-unknown failed ({s}); wasm policies are not embedded");
            false
        }
        Err(e) => {
            println!("cargo:warning=could not run cargo for policies/* ({e}); wasm policies are not embedded");
            false
        }
    };
    for (_, file) in POLICIES {
        let built = target_dir.join("wasm32-unknown-unknown/release").join(format!("{file}.wasm"));
        let dest = out.join(format!("{file}.wasm"));
        let bytes = if ok { std::fs::read(&built).unwrap_or_default() } else { Vec::new() };
        std::fs::write(&dest, bytes).expect("write to OUT_DIR");
    }
    adversarial(&root, &target_dir, &out);
}

/// Builds the hostile policies of `policies/adversarial` (one example per
/// behaviour) for wasm32, into `OUT_DIR/adversarial/NAME.wasm`, and tells
/// the crate where (`PERF_ADVERSARIAL_DIR`, see
/// `policy::wasm::adversarial`). They are written to disk, not embedded:
/// only the tests use them.
fn adversarial(root: &std::path::Path, target_dir: &std::path::Path, out: &std::path::Path) {
    let dir = out.join("adversarial");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/adversarial");
    println!("cargo:rustc-env=PERF_ADVERSARIAL_DIR={}", dir.display());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--config", "profile.release.debug=0"])
        .args(["-p", "perf-policy-adversarial", "--examples", "--target-dir"])
        .arg(target_dir);
    for var in ["RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CLIPPY_ARGS"] {
        cmd.env_remove(var);
    }
    for var in ["CARGO_BUILD_RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "CARGO_PRIMARY_PACKAGE"] {
        cmd.env_remove(var);
    }
    if !matches!(cmd.status(), Ok(s) if s.success()) {
        println!("cargo:warning=building policies/adversarial for wasm32 failed; the hostile-policy tests will fail");
        return;
    }
    let built = target_dir.join("wasm32-unknown-unknown/release/examples");
    let Ok(entries) = std::fs::read_dir(&built) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // Skip cargo's hashed copies (`name-0123abcd.wasm`).
        if name.ends_with(".wasm") && !name.contains('-') {
            let _ = std::fs::copy(e.path(), dir.join(&name));
        }
    }
}
