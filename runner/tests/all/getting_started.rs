//! docs/getting-started.md works as written: every `$ ./target/release/perf-runner`
//! line in it runs (with this build's binary, in a scratch directory that
//! sees the repository's `runner/`), in order, and the files it promises
//! exist. `serve` (the daemon of the two-terminal walk-through) runs in the
//! background until the page is done, then gets the Ctrl-C the page tells
//! of and must exit cleanly; a line that ends in `&` runs in the
//! background and must succeed by the next `$ wait` (or the page's end). The page's `cargo` lines are in
//! `.ci/run`, which this test also checks.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A background process, killed if the test fails before it is reaped.
struct Background(Child, String);

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The shell's `wait`: every background command has ended, successfully,
/// having printed something.
fn reap(background: &mut Vec<Background>) {
    for mut b in background.drain(..) {
        let status = b.0.wait().expect("a background command");
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = b.0.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        if let Some(mut e) = b.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        assert!(status.success(), "`{}` failed:\n{err}", b.1);
        assert!(!out.is_empty(), "`{}` printed nothing", b.1);
    }
}

#[test]
fn every_command_of_the_getting_started_page_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/getting-started.md")).expect("the page");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let dir = std::env::temp_dir().join(format!("perf-runner-getting-started-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::os::unix::fs::symlink(root.join("runner"), dir.join("runner")).expect("symlink runner/");
    let mut ran = 0;
    let mut daemon: Option<(Background, BufReader<std::process::ChildStdout>)> = None;
    let mut background = Vec::new();
    for line in page.lines().filter_map(|l| l.strip_prefix("$ ")) {
        if let Some(args) = line.strip_prefix("./target/release/perf-runner ") {
            let (args, in_background) = match args.strip_suffix(" &") {
                Some(a) => (a, true),
                None => (args, false),
            };
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_perf-runner"));
            cmd.args(args.split_whitespace()).current_dir(&dir).env_remove("PERF_RUNNER_CTL");
            if args.starts_with("serve") {
                assert!(daemon.is_none(), "a second daemon: `{line}`");
                let mut child = cmd.stdout(Stdio::piped()).spawn().expect("serve starts");
                let mut first = String::new();
                let mut out = BufReader::new(child.stdout.take().expect("stdout"));
                out.read_line(&mut first).expect("the daemon's first line");
                assert!(first.starts_with("serving on"), "`{line}`: {first}");
                daemon = Some((Background(child, line.to_string()), out));
            } else if in_background {
                let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("runs");
                background.push(Background(child, line.to_string()));
            } else {
                let out = cmd.output().expect("runs");
                assert!(out.status.success(), "`{line}` failed:\n{}", String::from_utf8_lossy(&out.stderr));
                assert!(!out.stdout.is_empty(), "`{line}` printed nothing");
            }
            ran += 1;
        } else if line == "wait" {
            reap(&mut background);
        } else if line.starts_with("cargo ") {
            assert!(ci.contains(line), "`{line}` is not run by .ci/run");
        } else {
            assert!(line.starts_with("git clone "), "unchecked command `{line}`");
        }
    }
    assert!(ran >= 6, "only {ran} perf-runner commands found");
    reap(&mut background);
    if let Some((mut d, mut out)) = daemon {
        let int = Command::new("kill").arg("-INT").arg(d.0.id().to_string()).status().expect("kill");
        assert!(int.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).expect("the daemon's output");
        let status = d.0.wait().expect("the daemon exits");
        assert!(status.success() && rest.contains(" 0 left in flight"), "`{}` after Ctrl-C: {status}: {rest}", d.1);
    }
    for f in ["out/exp1/latency-cdf-D_single.svg", "out/exp1/throughput-perf.svg", "out/exp1.json"] {
        assert!(dir.join(f).exists(), "the page promises {f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
