//! Builds the policies of the registry (`[[package.metadata.perf-policy]]`
//! in this crate's `Cargo.toml`) for `wasm32-unknown-unknown` so that the
//! dataplane can embed them (`policy::wasm::embedded`): a nested `cargo
//! build --release --target wasm32-unknown-unknown` into a target
//! directory under `OUT_DIR`, so it never contends with the outer build's
//! directory lock. From the same table it writes `OUT_DIR/registry.rs`,
//! the `policy::registry` of native constructors, embedded modules and
//! descriptions.
//!
//! The toolchain file names the wasm32 target, but rustup adds a toolchain
//! file's targets only when it installs the toolchain, not to a stable
//! toolchain that is already there. So when the target is missing from the
//! compiler's sysroot and rustup manages the toolchain, this script adds it
//! (`rustup target add wasm32-unknown-unknown`, with a cargo warning saying
//! so); without rustup it stops with what to install.
//!
//! A failed nested build fails the dataplane's build with the reason,
//! because a dataplane without its policy modules would fail later in
//! confusing ways. `PERF_NO_WASM_POLICIES=1` builds without them on
//! purpose (`embedded::*` then returns `None`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One entry of the registry table.
struct Entry {
    /// The policy's name.
    name: String,
    /// Its crate (package name).
    krate: String,
    /// Its native type in the crate (implements `Default` and `Policy`).
    native: String,
    /// One line on what it does.
    description: String,
}

impl Entry {
    /// The crate's name in Rust paths and in its `.wasm` file's name.
    fn ident(&self) -> String {
        self.krate.replace('-', "_")
    }
}

/// The registry table of `manifest`; a malformed one stops the build with
/// what is wrong.
fn registry(manifest: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(manifest).expect("read dataplane/Cargo.toml");
    let doc: toml::Table = text.parse().expect("dataplane/Cargo.toml is TOML");
    let table = doc
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("perf-policy"))
        .and_then(|t| t.as_array())
        .expect("dataplane/Cargo.toml has the policy registry, [[package.metadata.perf-policy]]");
    let mut entries: Vec<Entry> = Vec::new();
    for (i, row) in table.iter().enumerate() {
        let key = |k: &str| -> String {
            match row.get(k).and_then(|v| v.as_str()) {
                Some(v) if !v.is_empty() => v.to_string(),
                _ => panic!("policy registry entry {} (dataplane/Cargo.toml): `{k}` missing or not a string", i + 1),
            }
        };
        let e =
            Entry { name: key("name"), krate: key("crate"), native: key("native"), description: key("description") };
        let ident = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        assert!(
            ident(&e.ident()) && ident(&e.native) && !e.name.contains(':'),
            "policy registry entry {:?}: `crate` must be a package name, `native` a type name, `name` without ':'",
            e.name
        );
        assert!(!entries.iter().any(|o| o.name == e.name), "policy {:?} is registered twice", e.name);
        entries.push(e);
    }
    entries
}

/// `OUT_DIR/registry.rs`: `REGISTRY` and `NAMES` (see `policy::registry`).
fn write_registry(out: &Path, entries: &[Entry]) {
    let mut code =
        String::from("/// Every registered policy, in the table's order.\npub const REGISTRY: &[Registered] = &[\n");
    for e in entries {
        code.push_str(&format!(
            "    Registered {{\n        name: {:?},\n        description: {:?},\n        \
             wasm: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{}.wasm\")),\n        \
             native: || Box::new(<{}::{} as ::core::default::Default>::default()),\n    }},\n",
            e.name,
            e.description,
            e.ident(),
            e.ident(),
            e.native
        ));
    }
    code.push_str("];\n\n/// The registered names, in the table's order.\npub const NAMES: &[&str] = &[");
    for e in entries {
        code.push_str(&format!("{:?}, ", e.name));
    }
    code.push_str("];\n");
    std::fs::write(out.join("registry.rs"), code).expect("write OUT_DIR/registry.rs");
}

/// The outer build's wrappers and flags (clippy, coverage, native
/// RUSTFLAGS, target overrides) that must not reach the wasm build.
const OUTER_ENV: &[&str] = &[
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CLIPPY_ARGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_PRIMARY_PACKAGE",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("dataplane/ lives in the workspace root").to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", root.join("policies").display());
    println!("cargo:rerun-if-changed={}", root.join("policy-sdk").display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-env-changed=PERF_NO_WASM_POLICIES");
    let skip = std::env::var_os("PERF_NO_WASM_POLICIES").is_some_and(|v| v == "1");

    let policies = registry(&manifest_dir.join("Cargo.toml"));
    write_registry(&out, &policies);
    if !skip {
        ensure_wasm_target();
    }
    let target_dir = out.join("policies-target");
    let built = !skip && {
        let mut cmd = wasm_build(&root, &target_dir);
        for p in &policies {
            cmd.args(["-p", &p.krate]);
        }
        run_or_fail(cmd, "policies/*")
    };
    for p in &policies {
        let file = format!("{}.wasm", p.ident());
        let wasm = target_dir.join("wasm32-unknown-unknown/release").join(&file);
        let bytes = if built { std::fs::read(&wasm).expect("the nested build wrote the module") } else { Vec::new() };
        std::fs::write(out.join(&file), bytes).expect("write to OUT_DIR");
    }
    adversarial(&root, &target_dir, &out, skip);
}

/// The target the policies build for.
const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// Whether the compiler cargo runs has the wasm32 standard library
/// (`SYSROOT/lib/rustlib/wasm32-unknown-unknown/lib`); `None` when the
/// sysroot cannot be asked for.
fn wasm_target_installed() -> Option<bool> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).args(["--print", "sysroot"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Some(sysroot.join("lib/rustlib").join(WASM_TARGET).join("lib").is_dir())
}

/// Adds the wasm32 target through rustup when the compiler lacks it (see
/// the module comment); stops the build with what to do when it cannot.
fn ensure_wasm_target() {
    if wasm_target_installed() != Some(false) {
        return;
    }
    // Under rustup, cargo runs with RUSTUP_TOOLCHAIN naming the toolchain in use.
    let toolchain = std::env::var("RUSTUP_TOOLCHAIN").ok();
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", WASM_TARGET]);
    if let Some(t) = &toolchain {
        cmd.args(["--toolchain", t]);
    }
    let on = toolchain.as_deref().unwrap_or("the active toolchain");
    match cmd.output() {
        Ok(o) if o.status.success() => {
            println!(
                "cargo:warning=the {WASM_TARGET} target (for the embedded wasm policies) was missing from {on}: \
                 added it with `rustup target add {WASM_TARGET}`"
            );
        }
        Ok(o) => panic!(
            "the {WASM_TARGET} target (for the embedded wasm policies) is missing from {on}, and \
             `rustup target add {WASM_TARGET}` failed: {}\n(or set PERF_NO_WASM_POLICIES=1 to build without \
             the wasm policy modules)",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "the {WASM_TARGET} target (for the embedded wasm policies) is missing from this compiler's sysroot \
             and there is no rustup to add it ({e}): install the {WASM_TARGET} standard library for this \
             toolchain (or set PERF_NO_WASM_POLICIES=1 to build without the wasm policy modules)"
        ),
    }
}

/// `cargo build --release --target wasm32-unknown-unknown` in `root`,
/// into `target_dir`, without the outer build's wrappers and flags.
fn wasm_build(root: &Path, target_dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", WASM_TARGET, "--config", "profile.release.debug=0"])
        .arg("--target-dir")
        .arg(target_dir);
    for var in OUTER_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a nested wasm build; a failure stops the dataplane's build with
/// what to do about it.
fn run_or_fail(mut cmd: Command, what: &str) -> bool {
    match cmd.status() {
        Ok(s) if s.success() => true,
        other => panic!(
            "building {what} for {WASM_TARGET} failed ({other:?}): the nested cargo's errors are above \
             (set PERF_NO_WASM_POLICIES=1 to build without the wasm policy modules)"
        ),
    }
}

/// Builds the hostile policies of `policies/adversarial` (one example per
/// behaviour) for wasm32, into `OUT_DIR/adversarial/NAME.wasm`, and tells
/// the crate where (`PERF_ADVERSARIAL_DIR`, see
/// `policy::wasm::adversarial`). They are written to disk, not embedded:
/// only the tests use them.
fn adversarial(root: &Path, target_dir: &Path, out: &Path, skip: bool) {
    let dir = out.join("adversarial");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/adversarial");
    println!("cargo:rustc-env=PERF_ADVERSARIAL_DIR={}", dir.display());
    if skip {
        return;
    }
    let mut cmd = wasm_build(root, target_dir);
    cmd.args(["-p", "perf-policy-adversarial", "--examples"]);
    run_or_fail(cmd, "policies/adversarial");
    let built = target_dir.join("wasm32-unknown-unknown/release/examples");
    let entries = std::fs::read_dir(&built).expect("the nested build wrote its examples");
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // Skip cargo's hashed copies (`name-0123abcd.wasm`).
        if name.ends_with(".wasm") && !name.contains('-') {
            std::fs::copy(e.path(), dir.join(&name)).expect("copy a hostile module into OUT_DIR");
        }
    }
}
