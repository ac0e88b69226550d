//! Debian's own verbs binaries (`perftest` 4.5, `ibverbs-utils` 44), run
//! unchanged with `perf-runner exec` against a daemon: `ibv_devinfo`
//! sees the device, `ibv_rc_pingpong --chk` checks the bytes it ping-pongs,
//! and `ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_write_lat`,
//! `ib_read_lat` and `ib_send_lat` run server and client to their result
//! row. A bandwidth tool's average stays under the link (goodput above the
//! wire would be a bug, not noise). Without the binaries on `PATH` (`apt-get
//! install perftest ibverbs-utils`) the test prints a loud SKIPPED with
//! what it looked for; CI installs them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{scratch, Daemon};

/// The programs the test runs.
const PROGRAMS: [&str; 8] = [
    "ibv_devinfo",
    "ibv_rc_pingpong",
    "ib_write_bw",
    "ib_send_bw",
    "ib_read_bw",
    "ib_write_lat",
    "ib_read_lat",
    "ib_send_lat",
];

/// TCP ports the server sides listen on: away from perftest's default
/// (18515), one per run, so a server left over from a failed run or
/// another test binary does not answer.
const FIRST_PORT: u16 = 23_500;

/// How long one program may take: the daemon's loop, a server and a
/// client share a 2-core machine in CI.
const PROGRAM_LIMIT: Duration = Duration::from_secs(120);

/// Where `name` is on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `perf-runner exec --connect SOCK --tenant TENANT -- ARGS`, spawned.
fn exec(sock: &Path, tenant: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_perf-runner"))
        .args(["exec", "--connect"])
        .arg(sock)
        .args(["--tenant", tenant, "--"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perf-runner exec starts")
}

/// Waits for `child` under [`PROGRAM_LIMIT`]; kills it past that.
fn finish(mut child: Child, what: &str) -> Output {
    let end = Instant::now() + PROGRAM_LIMIT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("{what} ran past {PROGRAM_LIMIT:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Its stdout, after checking that it succeeded.
fn succeeded(out: &Output, what: &str) -> String {
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} exited {}:\n{so}\n{se}", out.status);
    format!("{so}{se}")
}

/// Whether something listens on TCP `port` (from `/proc/net/tcp{,6}`: a
/// probe connection would be taken by the server as its client).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Runs `args` as a server (tenant `srv-…`) and, once it listens, as its
/// client against `localhost` (tenant `cli-…`); both must succeed. Returns
/// the client's and the server's output.
fn server_and_client(sock: &Path, port: u16, args: &[&str]) -> (String, String) {
    let what = args.join(" ");
    let port_s = port.to_string();
    let mut server_args = args.to_vec();
    server_args.extend(["-p", &port_s]);
    let server = exec(sock, &format!("srv-{port}"), &server_args);
    let end = Instant::now() + PROGRAM_LIMIT;
    while !listening(port) {
        assert!(Instant::now() < end, "{what}: the server never listened on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client_args = server_args.clone();
    client_args.push("localhost");
    let client = exec(sock, &format!("cli-{port}"), &client_args);
    let client = succeeded(&finish(client, &format!("{what} (client)")), &format!("{what} (client)"));
    let server = succeeded(&finish(server, &format!("{what} (server)")), &format!("{what} (server)"));
    (client, server)
}

/// The numeric rows of perftest's result table whose first field is `size`.
fn result_rows(out: &str, size: u32) -> Vec<Vec<f64>> {
    out.lines()
        .filter_map(|l| {
            let v: Vec<f64> = l.split_whitespace().map_while(|w| w.parse().ok()).collect();
            (v.len() >= 3 && v[0] == size as f64).then_some(v)
        })
        .collect()
}

pub fn debian_programs() {
    let missing: Vec<&str> = PROGRAMS.iter().copied().filter(|p| on_path(p).is_none()).collect();
    if !missing.is_empty() {
        eprintln!(
            "======== SKIPPED debian_verbs_programs: not on PATH: {} (apt-get install perftest ibverbs-utils) ========",
            missing.join(", ")
        );
        return;
    }
    let d = scratch("verbs-apps");
    let daemon = Daemon::start(&d);
    let sock = daemon.sock.clone();

    let info = succeeded(&finish(exec(&sock, "info", &["ibv_devinfo", "-v"]), "ibv_devinfo"), "ibv_devinfo -v");
    assert!(info.contains("perfsim0") && info.contains("PORT_ACTIVE"), "{info}");

    let mut port = FIRST_PORT + (std::process::id() % 500) as u16 * 16;
    let mut next_port = || {
        port += 1;
        port
    };
    // Pings with a byte check on both sides, completions by polling and by
    // the completion channel (`-e`).
    for extra in [&[][..], &["-e"]] {
        let mut args = vec!["ibv_rc_pingpong", "-d", "perfsim0", "-s", "4096", "-n", "200", "--chk"];
        args.extend(extra);
        let (client, server) = server_and_client(&sock, next_port(), &args);
        for out in [&client, &server] {
            // Both directions of every iteration: 2 x 200 x 4096 B.
            assert!(out.contains("1638400 bytes in") && out.contains("200 iters in"), "{args:?}:\n{out}");
        }
    }
    // Bandwidth: the result row, its average under the 100 Gb/s link.
    for (tool, size) in [("ib_write_bw", 65536), ("ib_send_bw", 4096), ("ib_read_bw", 65536)] {
        let size_s = size.to_string();
        let args = ["-d", "perfsim0", "-s", &size_s, "-n", "2000", "--report_gbits"];
        let mut all = vec![tool];
        all.extend(args);
        let (client, _) = server_and_client(&sock, next_port(), &all);
        let rows = result_rows(&client, size);
        assert_eq!(rows.len(), 1, "{tool}: one result row:\n{client}");
        let (iters, avg) = (rows[0][1], rows[0][3]);
        eprintln!("  {tool} -s {size}: {avg} Gb/s average");
        assert!(iters == 2000.0 && avg > 0.0, "{tool}:\n{client}");
        assert!(avg <= 100.0, "{tool}: {avg} Gb/s of goodput is above the 100 Gb/s link:\n{client}");
    }
    // Latency: the result row of each, with min <= typical <= max.
    for tool in ["ib_write_lat", "ib_read_lat", "ib_send_lat"] {
        let (client, _) = server_and_client(&sock, next_port(), &[tool, "-d", "perfsim0", "-s", "64", "-n", "200"]);
        let rows = result_rows(&client, 64);
        assert_eq!(rows.len(), 1, "{tool}: one result row:\n{client}");
        let (iters, min, max, typical) = (rows[0][1], rows[0][2], rows[0][3], rows[0][4]);
        eprintln!("  {tool} -s 64: {typical} us typical");
        assert!(iters == 200.0 && 0.0 < min && min <= typical && typical <= max, "{tool}:\n{client}");
    }
    daemon.stop_clean();
}
