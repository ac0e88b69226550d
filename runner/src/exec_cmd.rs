//! `perf-runner exec`: runs an unmodified verbs program (perftest,
//! `ibv_rc_pingpong`, an operator's own service) on the `perf-verbs`
//! library, so that its verbs go through a running `perf-runner serve`.
//!
//! The program's loader finds `libibverbs.so.1` (and the provider and
//! `librdmacm` names it links) in a directory of symbolic links to
//! `libperf_verbs.so` put first on `LD_LIBRARY_PATH`; the library reads
//! the daemon's socket and the tenant from [`perf_verbs::SOCKET_ENV`] and
//! [`perf_verbs::TENANT_ENV`]. Nothing else of the program's environment
//! changes, and `exec` replaces itself with the program (its exit status
//! is the program's).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The environment variable that names the library to use instead of the
/// one found beside `perf-runner`.
pub const LIBRARY_ENV: &str = "PERF_VERBS_LIBRARY";

/// `perf-runner exec`'s flags.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon's socket (as `serve --socket`).
    #[arg(long, default_value = "perf-serve.sock", value_name = "SOCKET")]
    connect: PathBuf,
    /// The tenant to be (default: the one the daemon gives the program's
    /// process: its user's in the tenants file, or one named after its pid).
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// `libperf_verbs.so`: [`LIBRARY_ENV`], else beside this executable (a
/// `cargo build`) or in its `deps/` (what building perf-runner alone
/// updates), the newer of the two.
pub fn find_library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(LIBRARY_ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("{LIBRARY_ENV}={} is not a file", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("finding perf-runner's own path")?;
    let dir = exe.parent().context("perf-runner's directory")?;
    let looked = [dir.join(perf_verbs::LIBRARY_FILE), dir.join("deps").join(perf_verbs::LIBRARY_FILE)];
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let Some(p) = looked.iter().filter(|p| p.is_file()).max_by_key(|p| modified(p)) {
        return Ok(p.clone());
    }
    bail!(
        "no {} beside perf-runner (looked for {} and {}): build it with `cargo build --release -p perf-verbs`, or name it with {LIBRARY_ENV}",
        perf_verbs::LIBRARY_FILE,
        looked[0].display(),
        looked[1].display()
    )
}

/// A directory of links named as rdma-core's libraries, to `lib`: made
/// once per user and library, relinked atomically (a link made beside
/// and renamed over), so that concurrent `exec`s see whole links.
pub fn library_dir(lib: &Path) -> Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let lib = lib.canonicalize().with_context(|| format!("resolving {}", lib.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lib.hash(&mut h);
    // One directory per user: another user's links are not to be trusted.
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);

    let dir = std::env::temp_dir().join(format!("perf-verbs-{uid}-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The directory is in a shared temp dir: one another user made (or
    // may write to) could hold links to a library of theirs.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(&dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        bail!("{} is not a directory of this user's that only it may write to: remove it", dir.display());
    }
    for name in perf_verbs::LIBRARY_NAMES {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == lib) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&lib, &tmp).with_context(|| format!("linking {}", tmp.display()))?;
        std::fs::rename(&tmp, &link).with_context(|| format!("placing {}", link.display()))?;
    }
    Ok(dir)
}

/// Runs `perf-runner exec`: replaces this process with the program.
pub fn run(a: Args) -> Result<()> {
    let lib = find_library()?;
    let dir = library_dir(&lib)?;
    let socket = std::path::absolute(&a.connect).with_context(|| format!("resolving {}", a.connect.display()))?;
    if !socket.exists() {
        bail!(
            "no daemon socket at {} (start `perf-runner serve --socket {}` first)",
            socket.display(),
            socket.display()
        );
    }
    let mut path = dir.into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (program, args) = a.program.split_first().context("no program to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_LIBRARY_PATH", path).env(perf_verbs::SOCKET_ENV, &socket);
    if let Some(t) = &a.tenant {
        cmd.env(perf_verbs::TENANT_ENV, t);
    }
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {program}"))
}
