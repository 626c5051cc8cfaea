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
    let mut what = first.strip_prefix("error: ").unwrap_or(&first).to_string();
    if what.starts_with("unexpected argument '-") && !what.starts_with("unexpected argument '--") {
        // A value that starts with a dash reads as a flag: a folder named -x, say.
        what += "; a value that starts with - is given as --flag=-x, or as ./-x for a path";
    }
    let tips = paragraphs.filter(|p| p.starts_with("tip:"));
    std::iter::once(what)
        .chain(tips)
        .collect::<Vec<_>>()
        .join("; ")
}

/// For the binaries whose output on stdout is their product (`sample`, `score`, `bench`,
/// `heads_positions`): a write into a closed pipe ends the process quietly, as it ends `cat` or
/// `grep` (`sample --num-samples 100 | head -3`), and a standard output closed before the start
/// (`>&-`) is refused, since everything written would be lost. Rust starts programs with SIGPIPE
/// ignored, so the write would fail instead. `train`, `ablate` and `serve` do not call it: their
/// product is a run directory or the page, and they go on with their messages skipped
/// ([`note!`](crate::note), [`say!`](crate::say)). `what` names the output in the message.
pub fn stdout_is_the_product(what: &str) -> anyhow::Result<()> {
    if stdout_was_closed() {
        anyhow::bail!(
            "standard output is closed (>&-): {what} would be lost; send it to a file (> out.txt), a pipe or /dev/null"
        );
    }
    #[cfg(unix)]
    // SAFETY: `signal` with a valid signal number and SIG_DFL only sets how the kernel treats
    // SIGPIPE for this process; no handler (no Rust code) runs on the signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    Ok(())
}

/// Whether standard output was closed when the process started. Rust's runtime reopens a closed
/// standard stream on /dev/null, read-write; a shell's `> /dev/null` opens it write-only.
fn stdout_was_closed() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(out), Ok(null)) = (
            std::fs::metadata("/proc/self/fd/1").or_else(|_| std::fs::metadata("/dev/fd/1")),
            std::fs::metadata("/dev/null"),
        ) else {
            return false;
        };
        // SAFETY: F_GETFL on descriptor 1 only reads its status flags; an invalid descriptor
        // gives -1, which is not read-write.
        let flags = unsafe { libc::fcntl(1, libc::F_GETFL) };
        out.rdev() == null.rdev() && flags != -1 && flags & libc::O_ACCMODE == libc::O_RDWR
    }
    #[cfg(not(unix))]
    false
}

/// Writes `message` to stdout at once (flushed), for output that is the product: a write that
/// fails (a full disk) is an error that says so, instead of `println!`'s panic. A closed pipe is
/// skipped: it reaches here only where SIGPIPE is ignored (see [`stdout_is_the_product`]), in a
/// binary whose product is elsewhere.
pub fn write_out(message: std::fmt::Arguments) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(message).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::anyhow!(
            "cannot write to standard output: {e}; free some space or send the output elsewhere"
        )),
        _ => Ok(()),
    }
}

/// `print!` through [`write_out`]: returns an error instead of panicking.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

/// `println!` through [`write_out`]: returns an error instead of panicking.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that writes nothing, instead of panicking, where stderr is gone (a closed pipe):
/// for messages that are not the product (see [`stdout_is_the_product`]): a run goes on without them.
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

/// `path` as one word of a shell command, to paste: as it is where it holds only characters no
/// shell treats specially, otherwise in single quotes (a quote inside as `'\''`); after `./`
/// where it starts with `-`, which a command would read as an option. On Windows, for cmd and
/// PowerShell alike: in double quotes (no Windows path holds one or a control character).
pub fn shell_word(path: &std::path::Path) -> String {
    let mut text = path.to_string_lossy().into_owned();
    if text.starts_with('-') {
        text.insert_str(0, "./");
    }
    if cfg!(windows) {
        let plain = |c: char| c.is_alphanumeric() || "/\\._-+=:,@".contains(c);
        return match !text.is_empty() && text.chars().all(plain) {
            true => text,
            false => format!("\"{text}\""),
        };
    }
    let plain = |c: char| c.is_alphanumeric() || "/._-+=:,@%".contains(c);
    if text.chars().any(char::is_control) {
        // Bash's $'…', where a tab or a line end can be written as \t, \n.
        let escaped: String = text
            .chars()
            .map(|c| match c {
                '\t' => r"\t".to_string(),
                '\n' => r"\n".to_string(),
                '\r' => r"\r".to_string(),
                '\\' | '\'' => format!("\\{c}"),
                c if c.is_control() && (c as u32) < 0x80 => format!("\\x{:02x}", c as u32),
                c if c.is_control() => format!("\\u{:04x}", c as u32),
                c => c.to_string(),
            })
            .collect();
        return format!("$'{escaped}'");
    }
    match !text.is_empty() && text.chars().all(plain) {
        true => text,
        false => format!("'{}'", text.replace('\'', r"'\''")),
    }
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

/// The error and its causes on one line, joined by ": ", repeats dropped: each without the
/// backtrace that candle adds under RUST_BACKTRACE, the line ends and other control or
/// direction-changing characters that a path or a quoted text brought in [`escaped`].
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let message: Vec<&str> = text.lines().take_while(|l| !is_backtrace(l)).collect();
        let message = escaped(message.join("\n").trim());
        if !message.is_empty() && !parts.iter().any(|p| p.contains(&message)) {
            parts.push(message);
        }
    }
    parts.join(": ")
}

/// Whether `line` begins a backtrace as the standard library prints it (`   0: frame`).
fn is_backtrace(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("stack backtrace:") || line.starts_with("0: ")
}

/// `text` with each control character (a line end, a tab, an escape) and each invisible
/// character that changes the direction or shape of what follows it (U+202E, U+200B, U+FEFF …)
/// written as an escape (`\n`, `\u{202e}`), so that a path or a key shows as what it is and a
/// message stays one line.
pub fn escaped(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{061c}' | '\u{feff}')
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
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

    #[cfg(windows)]
    #[test]
    fn windows_paths_are_quoted_only_where_cmd_or_powershell_would_split_or_expand_them() {
        use super::shell_word;
        use std::path::Path;
        let run = r"C:\Users\li\checkpoints\run-1";
        assert_eq!(shell_word(Path::new(run)), run);
        assert_eq!(shell_word(Path::new(r"C:\my runs\a")), r#""C:\my runs\a""#);
        assert_eq!(shell_word(Path::new("")), r#""""#);
        assert_eq!(shell_word(Path::new("-x")), "./-x");
    }

    #[cfg(unix)]
    #[test]
    fn paths_are_quoted_only_where_a_shell_would_split_or_expand_them() {
        use super::shell_word;
        use std::path::Path;
        assert_eq!(
            shell_word(Path::new("checkpoints/run-1")),
            "checkpoints/run-1"
        );
        assert_eq!(shell_word(Path::new("my runs/a")), "'my runs/a'");
        assert_eq!(shell_word(Path::new("it's $HOME")), r"'it'\''s $HOME'");
        assert_eq!(shell_word(Path::new("")), "''");
        // A name that a command would read as an option.
        assert_eq!(shell_word(Path::new("-x")), "./-x");
        assert_eq!(shell_word(Path::new("-my run")), "'./-my run'");
        // A control character, as bash's $'…' writes it.
        assert_eq!(shell_word(Path::new("x\ty'z")), r"$'x\ty\'z'");
    }

    #[test]
    fn an_error_is_one_line_whatever_its_paths_hold() {
        use super::one_line;
        let path = std::path::Path::new("runs/a\nb\u{202e}txt.toml");
        let err = anyhow::anyhow!("no such file")
            .context(format!("cannot read config {}", path.display()));
        assert_eq!(
            one_line(&err),
            r"cannot read config runs/a\nb\u{202e}txt.toml: no such file"
        );
        // A backtrace that candle adds under RUST_BACKTRACE is left out; the message stays.
        let err = anyhow::anyhow!("shape mismatch\n   0: candle_core::error\n   1: main");
        assert_eq!(one_line(&err), "shape mismatch");
        // Characters that are plain text stay as they are.
        let err = anyhow::anyhow!("白日依山尽 is not 'a b': fine");
        assert_eq!(one_line(&err), "白日依山尽 is not 'a b': fine");
    }

    #[test]
    fn clap_errors_keep_what_is_missing_and_the_tip_on_one_line() {
        let missing = message(&["bin", "--poem", "x"]);
        assert_eq!(
            missing,
            "the following required arguments were not provided: --plot <PLOT>"
        );
        let dashed = message(&["bin", "--plot", "-x"]);
        assert!(
            dashed.contains("given as --flag=-x, or as ./-x"),
            "{dashed}"
        );
        let typo = message(&["bin", "--pome", "x"]);
        assert!(
            typo.starts_with("unexpected argument '--pome' found; tip:"),
            "{typo}"
        );
        assert!(typo.contains("'--poem'") && !typo.contains('\n'), "{typo}");
    }
}
