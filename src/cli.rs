//! What every binary shares: how an error reaches the user, and what a closed pipe does.

use std::process::ExitCode;

/// Parses the command line; a mistake in it ends the process with one line on stderr (what is
/// wrong, and a pointer to `--help`) and exit code 2. `--help` and `--version` print as usual.
pub fn parse<A: clap::Parser>() -> A {
    A::try_parse().unwrap_or_else(|err| {
        if !err.use_stderr() {
            err.exit()
        }
        crate::note!("error: {}; see --help", clap_message(&err.to_string()));
        std::process::exit(2)
    })
}

/// clap's message on one line: its first paragraph (where a list of missing arguments follows
/// its heading line) and its tips, without the usage that `--help` gives in full.
fn clap_message(text: &str) -> String {
    let mut paragraphs = text.split("\n\n").map(|p| {
        let lines: Vec<&str> = p.lines().map(str::trim).collect();
        lines.join(" ")
    });
    let first = paragraphs.next().unwrap_or_default();
    let what = first.strip_prefix("error: ").unwrap_or(&first).to_string();
    let tips = paragraphs.filter(|p| p.starts_with("tip:"));
    std::iter::once(what)
        .chain(tips)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Lets a write into a closed pipe end the process quietly, as it ends `cat` or `grep`
/// (`sample --num-samples 100 | head -3`), for the binaries whose output is their product. Rust
/// starts programs with SIGPIPE ignored, so the write fails instead and `println!` panics with a
/// backtrace. `train` does not call it: its product is the run directory, and it goes on
/// training with its messages skipped ([`note!`](crate::note)).
pub fn end_at_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: `signal` with a valid signal number and SIG_DFL only sets how the kernel treats
    // SIGPIPE for this process; no handler (no Rust code) runs on the signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `eprintln!` that writes nothing, instead of panicking, where stderr is gone (a closed pipe):
/// for the messages of a run that must go on without them (see [`end_at_closed_pipe`]).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::write_or_skip(&mut ::std::io::stderr(), format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// [`note!`] for stdout: `println!` that writes nothing where stdout is gone.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::write_or_skip(&mut ::std::io::stdout(), format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `message` to `to`, or nothing if it cannot be written.
pub fn write_or_skip(to: &mut impl std::io::Write, message: std::fmt::Arguments) {
    let _ = to.write_fmt(message);
}

/// Turns the outcome of a command into its exit code: on error, one line on stderr,
/// `error: <what went wrong>: <cause>…`, without a backtrace (even under RUST_BACKTRACE), and
/// exit code 1.
pub fn report(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            crate::note!("error: {}", one_line(&err));
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

#[cfg(test)]
mod tests {
    use super::clap_message;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Flags {
        #[arg(long)]
        plot: Option<String>,
        #[arg(long, requires = "plot")]
        poem: Option<String>,
    }

    fn message(args: &[&str]) -> String {
        let err = Flags::try_parse_from(args).expect_err("these flags are wrong");
        clap_message(&err.to_string())
    }

    #[test]
    fn clap_errors_keep_what_is_missing_and_the_tip_on_one_line() {
        let missing = message(&["bin", "--poem", "x"]);
        assert_eq!(
            missing,
            "the following required arguments were not provided: --plot <PLOT>"
        );
        let typo = message(&["bin", "--pome", "x"]);
        assert!(
            typo.starts_with("unexpected argument '--pome' found; tip:"),
            "{typo}"
        );
        assert!(typo.contains("'--poem'") && !typo.contains('\n'), "{typo}");
    }
}
