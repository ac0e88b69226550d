//! perf-runner: the command-line front end of PeRF-rs.

mod calibrate_cmd;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Calibrate(a) => calibrate_cmd::run(a),
    }
}
