//! docs/getting-started.md works as written: every `$ ./target/release/perf-runner`
//! line in it runs (with this build's binary, in a scratch directory that
//! sees the repository's `runner/`), and the files it promises exist. The
//! page's `cargo` lines are in `.ci/run`, which this test also checks.

use std::path::Path;

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
    for line in page.lines().filter_map(|l| l.strip_prefix("$ ")) {
        if let Some(args) = line.strip_prefix("./target/release/perf-runner ") {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_perf-runner"))
                .args(args.split_whitespace())
                .current_dir(&dir)
                .output()
                .expect("runs");
            assert!(out.status.success(), "`{line}` failed:\n{}", String::from_utf8_lossy(&out.stderr));
            assert!(!out.stdout.is_empty(), "`{line}` printed nothing");
            ran += 1;
        } else if line.starts_with("cargo ") {
            assert!(ci.contains(line), "`{line}` is not run by .ci/run");
        } else {
            assert!(line.starts_with("git clone "), "unchecked command `{line}`");
        }
    }
    assert!(ran >= 6, "only {ran} perf-runner commands found");
    for f in ["out/exp1/latency-cdf-D_single.svg", "out/exp1/throughput-perf.svg", "out/exp1.json"] {
        assert!(dir.join(f).exists(), "the page promises {f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
