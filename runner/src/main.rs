//! perf-runner: the command-line front end of PeRF-rs.

mod calibrate_cmd;
mod devices_cmd;
mod report;
mod run_cmd;
mod scenario;
mod workload;

use clap::{Parser, Subcommand};

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
    /// Lists the RDMA devices of this machine, their ports, link state and
    /// GIDs, and which isolation mechanisms run in the NIC and which are
    /// host-gated; says so plainly (and exits 0) when there is none.
    Devices(devices_cmd::Args),
    /// Runs a scenario on the simulated NIC through the dataplane under a
    /// policy and prints per-tenant results.
    Run(run_cmd::Args),
    /// Policies: `policy list` prints the built-in ones.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Lists the built-in policies with a one-line description each.
    List,
}

fn main() -> std::process::ExitCode {
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
        Command::Devices(a) => devices_cmd::run(a),
        Command::Run(a) => run_cmd::run(a),
        Command::Policy(PolicyCommand::List) => {
            for (name, what) in perf_dataplane::policy::PolicyHost::BUILTINS {
                println!("{name:<12} {what}");
            }
            Ok(())
        }
    }
}
