//! A local web page to watch runs train and compare them, write poems and look inside the model:
//! `cargo run --release --bin serve` (from the repository, so that the page can train).

use anyhow::{bail, Context, Result};
use clap::Parser;
use shige::serve::{serve, training::CONFIGS_DIR, Limits, ServeOptions, Served};
use shige::train::load::load_run;
use shige::train::run_dir::MODEL_FILE;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Serve a page on this machine: the runs under checkpoints/ with their curves side by side,
/// training started, watched and stopped from the page, poems written (streamed as they are
/// drawn) and set line by line with their tones, and what every head of every layer looks at.
#[derive(Parser)]
#[command(
    allow_negative_numbers = true,
    after_help = "Example:
  cargo run --release --bin serve -- --checkpoint checkpoints/<run>   # then open http://127.0.0.1:8080/"
)]
struct Args {
    /// Run directory written by `train` to write with first (default: the newest run under
    /// --runs).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// The folder of runs: listed by the page, and where the page's training writes.
    #[arg(long, default_value = "checkpoints")]
    runs: PathBuf,
    /// Port (0: any free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Address to listen on; only this machine's loopback unless --allow-remote.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    host: IpAddr,
    /// Let --host be an address other machines can reach (the page has no login).
    #[arg(long)]
    allow_remote: bool,
}

fn main() -> std::process::ExitCode {
    shige::cli::report(run())
}

/// The run under `root` whose weights were written last and load (a run whose weights do not,
/// such as weights holding NaN, is passed over with a note); `None` when it holds none and the
/// page can train one (the server runs in the repository, beside its configs/); an error when
/// neither.
fn newest_run(root: &Path) -> Result<Option<PathBuf>> {
    let mut runs: Vec<_> = shige::serve::runs::list_runs(root)
        .into_iter()
        .filter_map(|run| {
            let dir = shige::serve::runs::run_dir(root, &run.name).ok()?;
            let modified = dir.join(MODEL_FILE).metadata().ok()?.modified().ok()?;
            Some((modified, dir))
        })
        .collect();
    runs.sort();
    let newest = runs.into_iter().rev().map(|(_, dir)| dir).find(|dir| {
        let loads = load_run(dir);
        if let Err(e) = &loads {
            shige::note!("note: not writing with {} by default: {e:#}", dir.display());
        }
        loads.is_ok()
    });
    if newest.is_some() || Path::new(CONFIGS_DIR).is_dir() {
        return Ok(newest);
    }
    match root.is_dir() {
        true => bail!(
            "no trained run under {}/: train one with `cargo run --release --bin train`, pass --checkpoint, or start the server in the repository to train from the page",
            root.display()
        ),
        false => bail!(
            "no folder {}{}: train a run with `cargo run --release --bin train`, pass --checkpoint, or start the server in the repository to train from the page",
            root.display(),
            shige::files::where_missing(root)
        ),
    }
}

/// The `train` program beside this one (cargo builds both into target/release/).
fn train_beside_this() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let train = exe.with_file_name(format!("train{}", std::env::consts::EXE_SUFFIX));
    train.is_file().then_some(train)
}

/// Whether `host` is reachable from this machine only: a loopback address, IPv4's written as
/// IPv6 (`::ffff:127.0.0.1`) too.
fn only_this_machine(host: IpAddr) -> bool {
    host.to_canonical().is_loopback()
}

/// Why `address` could not be listened on, and what to do.
fn cannot_listen(address: SocketAddr, err: std::io::Error) -> anyhow::Error {
    let what = match err.kind() {
        std::io::ErrorKind::AddrInUse => "the port is taken: try --port 8081 (or 0 for any)",
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need administrator rights: use --port 8080 (or 0 for any)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "this machine has no such address: leave out --host for 127.0.0.1"
        }
        _ => "try another --port (or 0 for any)",
    };
    anyhow::anyhow!("cannot listen on {address}: {err}: {what}")
}

fn run() -> Result<()> {
    shige::perf::init();
    let args: Args = shige::cli::parse();
    if !only_this_machine(args.host) && !args.allow_remote {
        bail!(
            "--host {} can be reached from other machines and the page has no login: add --allow-remote if you mean it",
            args.host
        );
    }
    if args.runs.exists() && !args.runs.is_dir() {
        bail!(
            "--runs {} is a file: give the folder that holds the runs (checkpoints by default)",
            args.runs.display()
        );
    }
    let default_run = match args.checkpoint {
        Some(dir) => {
            load_run(&dir)?; // refused at once, with the reason, if it cannot be written with
            Some(dir)
        }
        None => newest_run(&args.runs)?,
    };
    let what = match &default_run {
        Some(dir) => dir.display().to_string(),
        None => format!(
            "no run yet (train one from the page; runs go to {}/)",
            args.runs.display()
        ),
    };
    let served = Arc::new(Served::new(ServeOptions {
        root: args.runs,
        default_run,
        limits: Limits::default(),
        train_exe: train_beside_this(),
    }));
    let runtime = tokio::runtime::Runtime::new().context("cannot start the server's runtime")?;
    let outcome = runtime.block_on(async {
        let address = SocketAddr::new(args.host, args.port);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| cannot_listen(address, e))?;
        // The line is a courtesy: where stdout is gone (`serve | true`), the page is still served.
        shige::say!(
            "serving {what} on http://{}/ (Ctrl-C stops)",
            listener.local_addr()?
        );
        tokio::select! {
            served = serve(listener, served.clone()) => served?,
            signal = ending_signal() => {
                shige::note!("{signal}: stopping; a run training from the page saves its checkpoint first");
                let served = served.clone();
                tokio::task::spawn_blocking(move || served.finish_training()).await?;
            }
        }
        anyhow::Ok(())
    });
    // Poems still being written are not waited for.
    runtime.shutdown_background();
    outcome
}

/// The first of Ctrl-C (SIGINT) and SIGTERM to reach the server, by name.
async fn ending_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut interrupt), Ok(mut terminate)) => tokio::select! {
                _ = interrupt.recv() => "Ctrl-C",
                _ = terminate.recv() => "SIGTERM",
            },
            // Without handlers the signals keep their default, ending the server at once; its
            // run then notices the closed pipe and saves.
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cannot_listen, only_this_machine};
    use std::io::{Error, ErrorKind};

    #[test]
    fn loopback_written_either_way_is_this_machine_only() {
        for host in ["127.0.0.1", "127.8.9.1", "::1", "::ffff:127.0.0.1"] {
            assert!(only_this_machine(host.parse().unwrap()), "{host}");
        }
        for host in ["0.0.0.0", "::", "192.0.2.1", "::ffff:192.0.2.1"] {
            assert!(!only_this_machine(host.parse().unwrap()), "{host}");
        }
    }

    #[test]
    fn a_port_that_cannot_be_had_says_why() {
        let address = "127.0.0.1:80".parse().unwrap();
        let message = |kind| cannot_listen(address, Error::from(kind)).to_string();
        assert!(
            message(ErrorKind::PermissionDenied).contains("below 1024 need administrator rights")
        );
        assert!(!message(ErrorKind::PermissionDenied).contains("taken"));
        assert!(message(ErrorKind::AddrInUse).contains("the port is taken"));
        assert!(message(ErrorKind::AddrNotAvailable).contains("no such address"));
    }
}
