//! What every binary shares: how an error reaches the user.

use std::process::ExitCode;

/// Parses the command line; a mistake in it ends the process with one line on stderr (what is
/// wrong, and a pointer to `--help`) and exit code 2. `--help` and `--version` print as usual.
pub fn parse<A: clap::Parser>() -> A {
    A::try_parse().unwrap_or_else(|err| {
        if !err.use_stderr() {
            err.exit()
        }
        let text = err.to_string();
        let first = text.lines().next().unwrap_or("").trim();
        let what = first.strip_prefix("error: ").unwrap_or(first);
        eprintln!("error: {what}; see --help");
        std::process::exit(2)
    })
}

/// Turns the outcome of a command into its exit code: on error, one line on stderr,
/// `error: <what went wrong>: <cause>…`, without a backtrace (even under RUST_BACKTRACE), and
/// exit code 1.
pub fn report(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line: the first line of each, joined by ": ", repeats dropped.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let first = text.lines().next().unwrap_or("").trim().to_string();
        if !first.is_empty() && !parts.iter().any(|p| p.contains(&first)) {
            parts.push(first);
        }
    }
    parts.join(": ")
}
