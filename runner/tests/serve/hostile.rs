//! The daemon under hostile and careless tenants, each a process of its
//! own: an attacker aiming at another tenant's memory, a client that
//! rewrites its buffers between posts, a SEND with no RECV posted, a huge
//! WRITE beside a light tenant, and a socket path that holds a user's file.

use super::*;

/// The victim's secret: byte `i` of its region.
fn secret(i: usize) -> u8 {
    (i as u8).wrapping_mul(31) ^ 0x5a
}

/// Client roles of this module: `victim SOCK NAME` and `attacker SOCK
/// NAME VICTIM ADDR RKEY`, `rewriter SOCK NAME`, `rnr SOCK NAME`, `big SOCK
/// NAME MIB`, `light SOCK NAME`.
pub(super) fn client_role(kind: &str, c: &mut Client, role: &[String]) -> Result<(), String> {
    let arg = |i: usize| role.get(i).cloned().ok_or(format!("argument {i} missing"));
    let num = |i: usize| arg(i)?.parse::<u64>().map_err(|e| e.to_string());
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let mut say = |s: String| -> Result<(), String> {
        writeln!(out, "{s}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())
    };
    let e = |e: perf_client::ClientError| e.to_string();
    let me = c.tenant().to_string();
    match kind {
        "victim" => {
            // QP 0 and 1 connected to each other, QP 2 left unconnected.
            let mr = c.reg_mr(1 << 16).map_err(e)?;
            c.bytes(mr).map_err(e)?.iter_mut().enumerate().for_each(|(i, b)| *b = secret(i));
            for _ in 0..3 {
                c.create_qp(0).map_err(e)?;
            }
            c.connect_qp(0, &me, 1).map_err(e)?;
            c.connect_qp(1, &me, 0).map_err(e)?;
            say(format!("MR {} {}", mr.addr, mr.rkey))?;
            let _ = line(&mut input)?;
            let bytes = c.bytes(mr).map_err(e)?;
            match (0..bytes.len()).find(|&i| bytes[i] != secret(i)) {
                Some(i) => say(format!("CHANGED at {i}"))?,
                None => say("INTACT".into())?,
            }
        }
        "attacker" => {
            let victim = arg(3)?;
            let remote = RemoteAddr { addr: num(4)?, rkey: num(5)? as u32 };
            let mr = c.reg_mr(1 << 16).map_err(e)?;
            let q = c.create_qp(0).map_err(e)?;
            // The victim's connected QP: refused, whatever the attacker knows.
            match c.connect_qp(q, &victim, 0) {
                Ok(()) => return Err("connected to the victim's connected QP".into()),
                Err(err) => say(format!("REFUSED {err}"))?,
            }
            // Its unconnected QP: the attacker's side connects, but the
            // victim's NIC takes nothing from a QP it is not connected to.
            c.connect_qp(q, &victim, 2).map_err(e)?;
            let wrs = [
                WorkRequest { wr_id: 1, qp: q, op: Op::Read(remote), mr: mr.index, offset: 0, len: 4096 },
                WorkRequest { wr_id: 2, qp: q, op: Op::Write(remote), mr: mr.index, offset: 4096, len: 4096 },
            ];
            let mut posted = 0;
            while posted < wrs.len() {
                posted += c.post(&wrs[posted..]).map_err(e)?;
            }
            let mut cpl = Vec::new();
            poll_until(c, &mut cpl, Duration::from_secs(30), |v| v.len() >= 2);
            if cpl.len() != 2 || cpl.iter().any(|x| x.status == Some(Status::Success)) {
                return Err(format!("the attack's requests: {cpl:?}"));
            }
            let bytes = c.bytes(mr).map_err(e)?;
            if (0..4096).all(|i| bytes[i] == secret(i)) {
                return Err("READ the victim's secret".into());
            }
            say(format!("FAILED {:?} {:?}", cpl[0].status, cpl[1].status))?;
            let _ = line(&mut input);
        }
        "rewriter" => {
            // QP 0 <-> QP 1. Each round rewrites the same source bytes, then
            // WRITEs, SENDs and READs them to the same destinations.
            let src = c.reg_mr(4 * MSG).map_err(e)?;
            let dst = c.reg_mr(4 * MSG).map_err(e)?;
            let (q0, q1) = (c.create_qp(0).map_err(e)?, c.create_qp(0).map_err(e)?);
            c.connect_qp(q0, &me, q1).map_err(e)?;
            c.connect_qp(q1, &me, q0).map_err(e)?;
            for round in 0..8u64 {
                let fill = |b: &mut [u8]| b.iter_mut().enumerate().for_each(|(i, x)| *x = pattern(round, i));
                fill(&mut c.bytes(src).map_err(e)?[..MSG]);
                let recv = WorkRequest { wr_id: 10, qp: q1, op: Op::Recv, mr: dst.index, offset: MSG as u64, len: 0 };
                let wrs = [
                    WorkRequest {
                        wr_id: 11,
                        qp: q0,
                        op: Op::Write(dst.remote(0)),
                        mr: src.index,
                        offset: 0,
                        len: MSG as u32,
                    },
                    WorkRequest { wr_id: 12, qp: q0, op: Op::Send, mr: src.index, offset: 0, len: MSG as u32 },
                    WorkRequest {
                        wr_id: 13,
                        qp: q0,
                        op: Op::Read(src.remote(0)),
                        mr: dst.index,
                        offset: 2 * MSG as u64,
                        len: MSG as u32,
                    },
                ];
                let recv_len = WorkRequest { len: MSG as u32, ..recv };
                let mut posted = 0;
                while posted < 1 {
                    posted += c.post(&[recv_len]).map_err(e)?;
                }
                posted = 0;
                while posted < wrs.len() {
                    posted += c.post(&wrs[posted..]).map_err(e)?;
                }
                let mut cpl = Vec::new();
                poll_until(c, &mut cpl, Duration::from_secs(30), |v| v.len() >= 4);
                if cpl.len() != 4 || cpl.iter().any(|x| x.status != Some(Status::Success)) {
                    return Err(format!("round {round}: {cpl:?}"));
                }
                let bytes = c.bytes(dst).map_err(e)?;
                for (what, at) in [("WRITE", 0), ("SEND", MSG), ("READ", 2 * MSG)] {
                    if let Some(i) = (0..MSG).find(|&i| bytes[at + i] != pattern(round, i)) {
                        return Err(format!("round {round}: the {what}'s byte {i} is stale"));
                    }
                }
            }
            say("FRESH 8".into())?;
        }
        "rnr" => {
            // A SEND to its own QP 1, which has no RECV posted yet.
            let mr = c.reg_mr(2 * MSG).map_err(e)?;
            let (q0, q1) = (c.create_qp(0).map_err(e)?, c.create_qp(0).map_err(e)?);
            c.connect_qp(q0, &me, q1).map_err(e)?;
            c.connect_qp(q1, &me, q0).map_err(e)?;
            let send = WorkRequest { wr_id: 1, qp: q0, op: Op::Send, mr: mr.index, offset: 0, len: 64 };
            while c.post(&[send]).map_err(e)? == 0 {}
            say("SENT".into())?;
            let _ = line(&mut input)?;
            let recv =
                WorkRequest { wr_id: 2, qp: q1, op: Op::Recv, mr: mr.index, offset: MSG as u64, len: MSG as u32 };
            while c.post(&[recv]).map_err(e)? == 0 {}
            let mut cpl = Vec::new();
            poll_until(c, &mut cpl, Duration::from_secs(30), |v| v.len() >= 2);
            if cpl.len() != 2 || cpl.iter().any(|x| x.status != Some(Status::Success)) {
                return Err(format!("the SEND and its RECV: {cpl:?}"));
            }
            say("DELIVERED".into())?;
        }
        "big" => {
            // One WRITE of MIB MiB between two halves of its own region.
            let len = num(3)? << 20;
            let mr = c.reg_mr(2 * len as usize).map_err(e)?;
            let (q0, q1) = (c.create_qp(0).map_err(e)?, c.create_qp(0).map_err(e)?);
            c.connect_qp(q0, &me, q1).map_err(e)?;
            c.connect_qp(q1, &me, q0).map_err(e)?;
            let _ = line(&mut input)?;
            let t0 = Instant::now();
            let wr = WorkRequest {
                wr_id: 1,
                qp: q0,
                op: Op::Write(mr.remote(len)),
                mr: mr.index,
                offset: 0,
                len: len as u32,
            };
            while c.post(&[wr]).map_err(e)? == 0 {}
            let mut cpl = Vec::new();
            poll_until(c, &mut cpl, Duration::from_secs(120), |v| !v.is_empty());
            if cpl.first().is_none_or(|x| x.status != Some(Status::Success)) {
                return Err(format!("the big WRITE: {cpl:?}"));
            }
            say(format!("DONE {}", t0.elapsed().as_micros()))?;
        }
        "light" => {
            // 4 KiB WRITEs one at a time until told to stop; the longest
            // wait for one, in us.
            let mr = c.reg_mr(2 * MSG).map_err(e)?;
            let (q0, q1) = (c.create_qp(0).map_err(e)?, c.create_qp(0).map_err(e)?);
            c.connect_qp(q0, &me, q1).map_err(e)?;
            c.connect_qp(q1, &me, q0).map_err(e)?;
            drop(input);
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = stop.clone();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::stdin().read_line(&mut s);
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            say("LIGHT".into())?;
            let (mut n, mut worst) = (0u64, Duration::ZERO);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let wr = WorkRequest {
                    wr_id: n,
                    qp: q0,
                    op: Op::Write(mr.remote(MSG as u64)),
                    mr: mr.index,
                    offset: 0,
                    len: MSG as u32,
                };
                let t0 = Instant::now();
                while c.post(&[wr]).map_err(e)? == 0 {}
                let mut cpl = Vec::new();
                poll_until(c, &mut cpl, Duration::from_secs(120), |v| !v.is_empty());
                if cpl.first().is_none_or(|x| x.status != Some(Status::Success)) {
                    return Err(format!("light WRITE {n}: {cpl:?}"));
                }
                worst = worst.max(t0.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            say(format!("WORST {} {n}", worst.as_micros()))?;
        }
        other => return Err(format!("unknown role {other}")),
    }
    Ok(())
}

/// The running policy's name, from `ctl stats`.
fn policy(daemon: &Daemon) -> String {
    let text = daemon.ctl_stats();
    let first = text.lines().next().unwrap_or_default();
    first.split("policy ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default().to_string()
}

fn spawn(kind: &str, sock: &Path, name: &str, rest: &[&str]) -> Proc {
    let mut args = vec![kind.to_string(), sock.display().to_string(), name.to_string()];
    args.extend(rest.iter().map(|s| s.to_string()));
    Proc::spawn(&args)
}

/// A tenant cannot reach another's memory: a connection to a QP its owner
/// connected elsewhere is refused, and a QP its owner left unconnected
/// takes nothing (the attacker's READ and WRITE fail, knowing the victim's
/// address and key); keys are unguessable; the victim's bytes are intact.
pub(super) fn attacker() {
    let d = scratch("attacker");
    let daemon = Daemon::start(&d);
    let mut victim = spawn("victim", &daemon.sock, "victim", &[]);
    let mr = victim.expect("MR");
    let parts: Vec<&str> = mr.split_whitespace().collect();
    let mut attacker = spawn("attacker", &daemon.sock, "attacker", &["victim", parts[1], parts[2]]);
    let refused = attacker.expect("REFUSED");
    assert!(refused.contains("connected its QP 0 to another QP"), "{refused}");
    attacker.expect("FAILED");
    victim.say("CHECK");
    assert_eq!(victim.expect("INTACT"), "INTACT");
    attacker.finish();
    let s = victim.child.wait().expect("wait");
    assert!(s.success());
    // Keys: two regions of two tenants share no structure an attacker
    // could step through (the old keys were (index << 8) | counter).
    let mut keys = Vec::new();
    for k in 0..4 {
        let opts = ConnectOptions { tenant: Some(format!("k{k}")), ..ConnectOptions::default() };
        let mut c = Client::connect(&daemon.sock, &opts).expect("connect");
        keys.push(c.reg_mr(4096).expect("reg_mr").rkey);
    }
    assert!(keys.iter().all(|k| k >> 8 > 64), "keys {keys:x?} look like (index << 8) | counter");
    daemon.still_serves_then_stops();
}

/// A client that rewrites its source buffer between posts gets its new
/// bytes at the destination every time, by WRITE, SEND and READ.
pub(super) fn rewriter() {
    let d = scratch("rewriter");
    let daemon = Daemon::start(&d);
    let mut p = spawn("rewriter", &daemon.sock, "rewriter", &[]);
    assert_eq!(p.expect("FRESH"), "FRESH 8");
    let s = p.child.wait().expect("wait");
    assert!(s.success());
    daemon.stop_clean();
}

/// A SEND waiting for its RECV past the watchdog's bound (1 s) is its
/// tenant's own stall: the daemon's policy stays, and the SEND completes
/// once the RECV is posted.
pub(super) fn rnr_keeps_the_policy() {
    let d = scratch("rnr");
    let daemon = Daemon::start(&d);
    assert_eq!(policy(&daemon), "perf");
    let mut p = spawn("rnr", &daemon.sock, "rnr", &[]);
    p.expect("SENT");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(policy(&daemon), "perf", "a tenant's own stall switched the daemon's policy");
    p.say("RECV");
    p.expect("DELIVERED");
    let s = p.child.wait().expect("wait");
    assert!(s.success());
    assert_eq!(policy(&daemon), "perf");
    daemon.stop_clean();
}

/// A huge WRITE does not hold the loop: a light tenant's 4 KiB WRITEs go
/// on while it is placed, their longest wait a small part of its time.
pub(super) fn big_write_beside_a_light_tenant() {
    let d = scratch("big");
    let daemon = Daemon::start(&d);
    let mut light = spawn("light", &daemon.sock, "light", &[]);
    light.expect("LIGHT");
    let mut big = spawn("big", &daemon.sock, "big", &["512"]);
    big.say("GO");
    let done = big.expect("DONE");
    let big_us: u64 = done.split_whitespace().nth(1).and_then(|x| x.parse().ok()).expect("DONE us");
    light.say("STOP");
    let worst = light.expect("WORST");
    let w: Vec<u64> = worst.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let (worst_us, n) = (w[0], w[1]);
    eprintln!("  512 MiB WRITE took {big_us} us; the light tenant's longest 4 KiB WRITE {worst_us} us ({n} WRITEs)");
    assert!(worst_us * 4 < big_us.max(400_000), "the light tenant waited {worst_us} us beside a {big_us} us WRITE");
    for p in [big, light] {
        let mut p = p;
        let s = p.child.wait().expect("wait");
        assert!(s.success());
    }
    daemon.stop_clean();
}

/// `serve --socket` on a user's regular file refuses and keeps the file; a
/// stale socket is replaced.
pub(super) fn socket_path_holds_a_file() {
    let d = scratch("sockfile");
    let file = d.join("notes.txt");
    std::fs::write(&file, b"data\n").expect("the user's file");
    let out = Command::new(env!("CARGO_BIN_EXE_perf-runner"))
        .args(["serve", "--socket"])
        .arg(&file)
        .arg("--ctl")
        .arg(d.join("x.ctl"))
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).expect("the file is still there"), b"data\n");
    // A socket nothing listens on any more is replaced.
    drop(std::os::unix::net::UnixListener::bind(d.join("serve.sock")).expect("a socket"));
    let daemon = Daemon::start(&d);
    daemon.stop_clean();
}

/// The control socket reads a request line up to its cap and refuses the
/// rest; `swap` reads a module from a regular file only, of bounded size,
/// so `/dev/zero` or a FIFO is refused at once and the policy stays.
pub(super) fn ctl_bounds_what_it_reads() {
    use std::io::{BufRead, Write};
    let d = scratch("ctlbounds");
    let daemon = Daemon::start(&d);
    let stream = std::os::unix::net::UnixStream::connect(&daemon.ctl).expect("ctl connects");
    let mut writer = stream.try_clone().expect("clone");
    // A megabyte with no newline: the daemon stops reading at its cap.
    let flood = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..16 {
            if writer.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut answer = String::new();
    std::io::BufReader::new(&stream).read_line(&mut answer).expect("an answer");
    assert!(answer.contains("\"ok\":false") && answer.contains("at most"), "{answer}");
    drop(stream);
    let _ = flood.join();
    let fifo = d.join("f.wasm");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    for (module, want) in [("/dev/zero".to_string(), "character device"), (fifo.display().to_string(), "FIFO")] {
        let t0 = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_perf-runner"))
            .args(["ctl", "--socket"])
            .arg(&daemon.ctl)
            .args(["swap", &module])
            .output()
            .expect("ctl swap");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success() && text.contains(want), "swap {module}: {text}");
        assert!(t0.elapsed() < Duration::from_secs(4), "swap {module} answered in {:?}", t0.elapsed());
    }
    assert_eq!(policy(&daemon), "perf", "the policy stays");
    daemon.stop_clean();
}

/// The daemon's limits: a client gets clear refusals past its QPs, its
/// regions and its bytes of regions; connections past `--max-clients`
/// are refused at once; a connection that never says hello is closed
/// after the hello timeout and its slot comes back; the daemon serves on.
pub(super) fn limits_refuse_clearly_and_the_daemon_serves_on() {
    use std::io::Read;
    let d = scratch("limits");
    let flags = ["--max-clients", "3", "--hello-timeout-ms", "700", "--max-qps", "4", "--max-mrs", "2"];
    let (daemon, _) = Daemon::start_with(&d, &[&flags[..], &["--max-mr-bytes", "1048576"]].concat());
    let opts = |name: &str| ConnectOptions { tenant: Some(name.into()), ..ConnectOptions::default() };
    let mut c = Client::connect(&daemon.sock, &opts("quota")).expect("a client connects");
    for _ in 0..4 {
        c.create_qp(0).expect("a QP within the quota");
    }
    let e = c.create_qp(0).expect_err("the fifth QP").to_string();
    assert!(e.contains("--max-qps 4"), "{e}");
    c.reg_mr(4096).expect("a region within the quota");
    let e = c.reg_mr(2 << 20).expect_err("2 MiB more").to_string();
    assert!(e.contains("--max-mr-bytes"), "{e}");
    c.reg_mr(4096).expect("a second region");
    let e = c.reg_mr(4096).expect_err("a third region").to_string();
    assert!(e.contains("--max-mrs 2"), "{e}");
    // Two silent connections fill the daemon's three slots.
    let silent: Vec<_> =
        (0..2).map(|_| std::os::unix::net::UnixStream::connect(&daemon.sock).expect("connects")).collect();
    std::thread::sleep(Duration::from_millis(100));
    let e = Client::connect(&daemon.sock, &opts("fourth")).err().expect("past --max-clients").to_string();
    assert!(e.contains("--max-clients"), "{e}");
    // Each silent one is closed after the hello timeout.
    let t0 = std::time::Instant::now();
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("the daemon closes it");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "closed after {:?}", t0.elapsed());
    drop(c);
    daemon.still_serves_then_stops();
}

/// Controllers are served at once: two that hold their connections
/// without a whole request (one silent, one a byte at a time) do not hold
/// `ctl stats` back, and each gets an error when its time is up.
pub(super) fn slow_controllers_hold_only_themselves() {
    use std::io::{BufRead, Write};
    let d = scratch("slowctl");
    let daemon = Daemon::start(&d);
    let silent = std::os::unix::net::UnixStream::connect(&daemon.ctl).expect("ctl connects");
    let mut dribble = std::os::unix::net::UnixStream::connect(&daemon.ctl).expect("ctl connects");
    dribble.write_all(b"{\"cmd\":").expect("a first byte");
    let t0 = std::time::Instant::now();
    assert!(policy(&daemon) == "perf", "stats answers");
    assert!(t0.elapsed() < Duration::from_secs(3), "ctl stats took {:?} beside two slow controllers", t0.elapsed());
    // Each slow one is answered with an error once its time is up.
    for s in [&silent, &dribble] {
        s.set_read_timeout(Some(Duration::from_secs(15))).expect("timeout");
        let mut answer = String::new();
        std::io::BufReader::new(s).read_line(&mut answer).expect("an answer");
        assert!(answer.contains("\"ok\":false") && answer.contains("within"), "{answer}");
    }
    daemon.stop_clean();
}

/// Who may connect is the operator's choice: the sockets are the owner's
/// alone by default (0600), and get the mode and group asked for.
pub(super) fn sockets_get_the_mode_and_group_asked_for() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |p: &Path| std::fs::metadata(p).expect("socket").permissions().mode() & 0o777;
    let d = scratch("modes");
    let daemon = Daemon::start(&d);
    assert_eq!((mode(&daemon.sock), mode(&daemon.ctl)), (0o600, 0o600), "the defaults");
    daemon.stop_clean();
    let d = scratch("modes2");
    let flags = ["--socket-mode", "0660", "--socket-group", "0", "--ctl-mode", "640", "--ctl-group", "root"];
    let (daemon, _) = Daemon::start_with(&d, &flags);
    assert_eq!((mode(&daemon.sock), mode(&daemon.ctl)), (0o660, 0o640));
    let gid = |p: &Path| std::fs::metadata(p).expect("socket").gid();
    assert_eq!((gid(&daemon.sock), gid(&daemon.ctl)), (0, 0));
    daemon.stop_clean();
    // A mode that is not octal, a group that does not exist: refused before anything listens.
    for (flag, value, want) in
        [("--socket-mode", "rw-rw----", "octal"), ("--ctl-group", "no-such-group-here", "no such group")]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_perf-runner"))
            .args(["serve", "--socket"])
            .arg(d.join("x.sock"))
            .arg("--ctl")
            .arg(d.join("x.ctl"))
            .args([flag, value])
            .output()
            .expect("serve");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains(want), "{flag} {value}: {text}");
        assert!(!d.join("x.sock").exists(), "nothing listens");
    }
}
