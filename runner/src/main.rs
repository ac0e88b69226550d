//! perf-runner: the command-line front end of PeRF-rs.

mod calibrate_cmd;
mod compare_cmd;
mod conn_slots;
mod ctl;
mod devices_cmd;
mod doctor_cmd;
mod driver;
mod exec_cmd;
mod isolation;
mod live;
mod loop_cost;
mod output;
mod perftest_cmd;
mod plot;
mod realtime;
mod report;
mod run_cmd;
mod scenario;
mod serve;
mod workload;

use clap::{Parser, Subcommand};
use perf_dataplane::traffic::TestOp;
use perftest_cmd::Test;

/// Runs PeRF-rs scenarios on the simulated (or a real) RNIC.
#[derive(Parser)]
#[command(name = "perf-runner", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the simulator's calibration cases (perftest-like traffic straight
    /// on the modelled NIC) and prints them against the ConnectX-6 figures.
    Calibrate(calibrate_cmd::Args),
    /// Measures the dataplane loop's cost on this machine (over the null
    /// RNIC) and writes a file that `run --loop-cost FILE` reads
    /// (docs/loop-cost.md).
    #[command(name = "calibrate-loop")]
    CalibrateLoop(loop_cost::CalibrateArgs),
    /// Lists the RDMA devices of this machine, their ports, link state and
    /// GIDs, and which isolation mechanisms run in the NIC and which are
    /// host-gated; says so plainly (and exits 0) when there is none.
    Devices(devices_cmd::Args),
    /// Checks what a run on a real RDMA device would hit here (memlock,
    /// max_cqe, send-queue slots, GID, MTU) and says how to fix it; exits
    /// 1 when a run would fail.
    Doctor(doctor_cmd::Args),
    /// Runs a scenario through the dataplane under a policy and prints
    /// per-tenant results: on the simulated NIC (default), or on a real
    /// RDMA device with `--backend verbs --device NAME [--peer HOST:PORT]`.
    Run(run_cmd::Args),
    /// Runs one scenario (same seed) under several policies and hardware
    /// modes, and each tenant group alone, and prints them side by side.
    Compare(compare_cmd::Args),
    /// Runs the victim x attacker isolation matrix under every policy and
    /// hardware baseline and judges each tenant against its entitlement
    /// (docs/isolation.md).
    Matrix(isolation::matrix::Args),
    /// ib_write_bw on the simulator: perftest's flags and columns.
    #[command(name = "write-bw")]
    WriteBw(perftest_cmd::Args),
    /// ib_write_lat on the simulator (latency is half the round trip).
    #[command(name = "write-lat")]
    WriteLat(perftest_cmd::Args),
    /// ib_send_bw on the simulator.
    #[command(name = "send-bw")]
    SendBw(perftest_cmd::Args),
    /// ib_send_lat on the simulator (latency is half the round trip).
    #[command(name = "send-lat")]
    SendLat(perftest_cmd::Args),
    /// ib_read_bw on the simulator.
    #[command(name = "read-bw")]
    ReadBw(perftest_cmd::Args),
    /// ib_read_lat on the simulator (latency is the whole READ).
    #[command(name = "read-lat")]
    ReadLat(perftest_cmd::Args),
    /// Prints a shell completion script: `perf-runner completions bash >
    /// /etc/bash_completion.d/perf-runner` (also zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Live control of a `run --realtime --ctl`: hot swaps, stats, pause /
    /// resume of a tenant, over the run's control socket.
    Ctl(ctl::Args),
    /// Runs the dataplane as a daemon for tenants that are other processes
    /// (the `perf-client` library; docs/shm-abi.md): shared-memory rings,
    /// memory shared as memfds, live control as `run --realtime --ctl`.
    Serve(serve::Args),
    /// Runs an unmodified verbs program (perftest, ibv_rc_pingpong, ...)
    /// with its verbs going through a running `serve`:
    /// `perf-runner exec --tenant NAME -- ib_write_bw -d perfsim0`
    /// (docs/unmodified-apps.md).
    Exec(exec_cmd::Args),
    /// Policies: `policy list` prints the built-in ones.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Lists the built-in policies with a one-line description each, and
    /// the embedded wasm modules (`--policy` also takes a .wasm file).
    List,
    /// Loads and validates a policy (`.wasm` file, `wasm:NAME` or a
    /// built-in name), prints its ABI version and name, and dry-runs it on
    /// a synthetic tenant set: what it would decide.
    Check {
        /// The policy.
        policy: String,
    },
}

fn main() -> std::process::ExitCode {
    // Logs go to stderr, filtered by RUST_LOG (warnings by default).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One clear line first, then the chain of causes.
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Calibrate(a) => calibrate_cmd::run(a),
        Command::CalibrateLoop(a) => loop_cost::calibrate(a),
        Command::Devices(a) => devices_cmd::run(a),
        Command::Doctor(a) => doctor_cmd::run(a),
        Command::Run(a) => run_cmd::run(a),
        Command::Compare(a) => compare_cmd::run(a),
        Command::Matrix(a) => isolation::matrix::run(a),
        Command::Ctl(a) => ctl::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Exec(a) => exec_cmd::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "perf-runner", &mut std::io::stdout());
            Ok(())
        }
        Command::WriteBw(a) => perftest_cmd::run(a, Test::Bw, TestOp::Write),
        Command::WriteLat(a) => perftest_cmd::run(a, Test::Lat, TestOp::Write),
        Command::SendBw(a) => perftest_cmd::run(a, Test::Bw, TestOp::Send),
        Command::SendLat(a) => perftest_cmd::run(a, Test::Lat, TestOp::Send),
        Command::ReadBw(a) => perftest_cmd::run(a, Test::Bw, TestOp::Read),
        Command::ReadLat(a) => perftest_cmd::run(a, Test::Lat, TestOp::Read),
        Command::Policy(PolicyCommand::List) => {
            for p in perf_dataplane::policy::PolicyHost::BUILTINS {
                println!("{:<17} {}", p.name, p.description);
            }
            for name in perf_dataplane::policy::wasm::embedded::NAMES {
                let what = "the same policy compiled to wasm (policies/), run in the sandbox";
                println!("{:<17} {what}", format!("wasm:{name}"));
            }
            Ok(())
        }
        Command::Policy(PolicyCommand::Check { policy }) => policy_check(&policy),
    }
}

/// `perf-runner policy check`.
fn policy_check(policy: &str) -> anyhow::Result<()> {
    use perf_dataplane::policy::PolicyHost;
    use perf_policy_sdk::{RequestInfo, RequestOp, TenantInfo, TenantPlan, TenantStats};

    let mut host = PolicyHost::load(policy).map_err(|e| run_cmd::PolicyRefused::new("policy", policy, e))?;
    match host.wasm_abi_version() {
        Some((major, minor)) => println!("wasm module, ABI {major}.{minor}: valid (all hooks present)"),
        None => println!("built-in native policy"),
    }
    println!("name: {}   tick interval: {} ns", host.name(), host.tick_interval_ns());
    // A bandwidth tenant (1 MB messages, 5 QPs), a delay-sensitive one
    // (16 B, depth 1) and a message-sensitive one (16 B, depth 128).
    let tenants = [("bandwidth", 1u64 << 20, 128u32, 5u32), ("delay", 16, 1, 1), ("message", 16, 128, 1)];
    let stats: Vec<TenantStats> = tenants
        .iter()
        .enumerate()
        .map(|(i, &(_, size, depth, qps))| TenantStats {
            tenant: i as u32,
            qps,
            backlogged_qps: qps,
            max_depth: depth,
            ewma_msg_bytes: size as f64,
            max_msg_bytes: size,
            completed: 100,
            bytes: 100 * size,
            mean_latency_ns: 10_000,
            weight: 1,
            p99_latency_ns: 20_000,
        })
        .collect();
    for (i, &(_, _, _, qps)) in tenants.iter().enumerate() {
        host.on_tenant(&TenantInfo { tenant: i as u32, qps, weight: 1 });
    }
    let mut plans = vec![TenantPlan::PASSTHROUGH; tenants.len()];
    host.on_tick(1_000_000, &stats, &mut plans);
    println!("dry run, one tick:");
    for (i, ((label, size, _, _), p)) in tenants.iter().zip(&plans).enumerate() {
        let req = RequestInfo { tenant: i as u32, qp: 0, len: *size, op: RequestOp::Write, depth: 1 };
        let split = host.on_request(&req, p);
        println!(
            "  {label:<10} class {:?}, active QPs {}, quantum {} req / {} B / {} ns, split >= {} B into {} B + {} zero-weight WRs; a {size} B request -> {split:?}",
            p.class, p.max_active_qps, p.quantum_requests, p.quantum_bytes, p.quantum_ns, p.split_threshold,
            p.split.chunk_bytes, p.split.zero_weight_per_chunk
        );
    }
    let c = host.counters;
    println!("counters: {} calls, {} rejections, {} traps, {} fallbacks", c.calls, c.rejections, c.traps, c.fallbacks);
    if let Some(exit) = host.exit_info() {
        anyhow::bail!("the policy was dropped in {}: {:?}: {}", exit.hook, exit.kind, exit.message);
    }
    Ok(())
}
