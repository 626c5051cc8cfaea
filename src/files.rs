//! Reading and writing the project's files safely: only regular files are read, never more than a
//! stated size (a FIFO would block forever, /dev/zero would fill the memory), and every write goes
//! to a uniquely named temporary file that is flushed and then renamed over its target.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest config or ablation spec read (a config is a few hundred bytes).
pub const CONFIG_LIMIT: u64 = 1 << 20;
/// The largest corpus read (the shipped one is 4.8 MB).
pub const CORPUS_LIMIT: u64 = 1 << 30;
/// The largest file of poems to score, from a file or standard input (the whole shipped corpus
/// is 4.8 MB).
pub const POEMS_LIMIT: u64 = 64 << 20;
/// The largest tokenizer.json or metrics.csv read.
pub const SMALL_FILE_LIMIT: u64 = 64 << 20;
/// The largest safetensors file read (weights, or weights with the optimiser's moments).
pub const WEIGHTS_LIMIT: u64 = 16 << 30;

/// Reads the whole of `path`, which must be a regular file of at most `limit` bytes. The error
/// says which rule was broken; its caller names the file's role.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no such file{}", where_missing(path)),
        ),
        std::io::ErrorKind::InvalidFilename => std::io::Error::new(
            std::io::ErrorKind::InvalidFilename,
            "the file system allows no such name (too long, or on Windows holding : * ? \" < > | or a control character): give another",
        ),
        _ => e,
    })?;
    if !meta.is_file() {
        return Err(invalid(
            "it is not a regular file (a directory, FIFO or device): give a file".into(),
        ));
    }
    if meta.len() > limit {
        return Err(invalid(format!(
            "it is {} bytes, more than the {limit} this program reads",
            meta.len()
        )));
    }
    read_capped(std::fs::File::open(path)?, limit, meta.len() as usize)
}

/// Where a relative `path` that does not exist was looked for and, where a folder above the
/// current one holds it (the repository, when run from one of its subfolders), what to do:
/// `" in /home/u/shige/docs; /home/u/shige/configs/default.toml exists: run from /home/u/shige or
/// give that path"`. Failing that, the repository this program was built from, where it runs
/// from that build (`cargo run` elsewhere). Empty for an absolute path.
pub fn where_missing(path: &Path) -> String {
    let Some(cwd) = std::env::current_dir().ok().filter(|_| path.is_relative()) else {
        return String::new();
    };
    let above = cwd.ancestors().skip(1).find(|dir| dir.join(path).exists());
    let built_here = || {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let exe = std::env::current_exe().ok()?;
        (exe.starts_with(repo) && repo != cwd && repo.join(path).exists()).then_some(repo)
    };
    match above.or_else(built_here) {
        Some(repo) => format!(
            " in {}; {} exists: run from {} or give that path",
            cwd.display(),
            repo.join(path).display(),
            repo.display()
        ),
        None => format!(" in {}", cwd.display()),
    }
}

/// All of `source`, or an error once it has given more than `limit` bytes.
fn read_capped(source: impl Read, limit: u64, expected: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(expected);
    source.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it holds more than the {limit} bytes this program reads"),
        ));
    }
    Ok(bytes)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64) -> std::io::Result<String> {
    utf8(read_limited(path, limit)?)
}

/// Standard input to its end, at most `limit` bytes of UTF-8 text (for `-` as a file name).
pub fn read_stdin_text_limited(limit: u64) -> std::io::Result<String> {
    utf8(read_capped(std::io::stdin().lock(), limit, 0)?)
}

/// `bytes` as text without a leading byte-order mark (which Windows editors write, and which
/// would otherwise stick to the first line), or an error naming the offset of the first byte that
/// is not UTF-8.
fn utf8(mut bytes: Vec<u8>) -> std::io::Result<String> {
    const BOM: &[u8] = "\u{feff}".as_bytes();
    if bytes.starts_with(BOM) {
        bytes.drain(..BOM.len());
    }
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Creates the directory `dir` (and its parents) for the output that `flag` names, saying so
/// where a file or a symbolic link to nothing stands in its way.
pub fn create_dir(dir: &Path, flag: &str) -> anyhow::Result<()> {
    let text = dir.to_string_lossy();
    if let Some(c) = text.chars().find(|&c| crate::data::error::is_invisible(c)) {
        anyhow::bail!(
            "{} holds {}, which a name should not: every message would print it; give {flag} a name without it",
            crate::cli::escaped(&text),
            crate::data::error::describe_char(c)
        );
    }
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "{} is a file, not a directory: give {flag} a directory",
            dir.display()
        );
    }
    if let Some(link) = dir.ancestors().find(|a| a.is_symlink() && !a.exists()) {
        let target = std::fs::read_link(link).unwrap_or_default();
        anyhow::bail!(
            "{} is a symbolic link to {}, which does not exist: create that directory, or give {flag} another one",
            link.display(),
            target.display()
        );
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create {}: {e}: choose another {flag}",
            dir.display()
        )
    })
}

/// The name [`check_writable`]'s probe is the temporary file of.
pub const WRITE_CHECK: &str = "write-check";

/// Checks that files can be written in the directory `dir` (which exists), by writing and
/// removing an empty temporary file: a read-only directory is refused before any work.
pub fn check_writable(dir: &Path, flag: &str) -> anyhow::Result<()> {
    let probe = temporary_path(&dir.join(WRITE_CHECK));
    std::fs::File::create(&probe).map_err(|e| {
        anyhow::anyhow!(
            "cannot write in {}: {e}: make it writable, or choose another {flag}",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `dir` and those of its parents that do not exist yet, innermost first: what [`create_dir`]
/// would make, for [`remove_empty_dirs`] to remove again when the command fails.
pub fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// Removes the directories of [`missing_dirs`], innermost first, as long as they are empty.
pub fn remove_empty_dirs(made: &[PathBuf]) {
    for dir in made {
        if std::fs::remove_dir(dir).is_err() {
            break; // not empty: something was written there that must stay
        }
    }
}

/// The suffix every temporary file of [`atomic_write`] ends with.
pub const TMP_SUFFIX: &str = ".tmp";

/// The process that wrote `name`, where it is named as [`atomic_write`] (or [`check_writable`])
/// names its temporary file for one of `targets`: `.TARGET.PID.N.tmp`, exactly. A user's
/// `.notes.tmp` or `.a.1.2.tmp` is not one.
pub fn temporary_of(name: &str, targets: &[&str]) -> Option<u32> {
    let middle = name.strip_prefix('.')?.strip_suffix(TMP_SUFFIX)?;
    let mut parts = middle.rsplitn(3, '.');
    let number = |part: Option<&str>| {
        part.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?
            .parse::<u64>()
            .ok()
    };
    let (_n, pid, target) = (number(parts.next())?, number(parts.next())?, parts.next()?);
    let pid = u32::try_from(pid).ok()?;
    targets.contains(&target).then_some(pid)
}

/// Whether `name` is one of [`temporary_of`]'s names for one of `targets`.
pub fn is_temporary_of(name: &str, targets: &[&str]) -> bool {
    temporary_of(name, targets).is_some()
}

/// Whether a process `pid` runs on this machine (true where the system cannot say: a file that
/// such a process may be writing is left alone).
pub fn process_runs(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill() with signal 0 sends nothing; it only asks whether the process exists.
        let found = unsafe { libc::kill(pid, 0) } == 0;
        found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::Foundation::{CloseHandle, ERROR_ACCESS_DENIED, STILL_ACTIVE};
        use windows_sys::Win32::System::Threading::{
            GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
        };
        // SAFETY: OpenProcess takes a plain number and gives a handle or null; the handle is
        // only read by GetExitCodeProcess into a local and closed once.
        unsafe {
            let handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
            if handle.is_null() {
                // No such process, or one this user may not ask about: then it runs.
                let denied = ERROR_ACCESS_DENIED as i32;
                return std::io::Error::last_os_error().raw_os_error() == Some(denied);
            }
            let mut code = 0u32;
            let asked = GetExitCodeProcess(handle, &mut code) != 0;
            CloseHandle(handle);
            !asked || code == STILL_ACTIVE as u32
        }
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = pid;
        true
    }
}

/// A temporary name beside `path` that no other write uses: `.NAME.PID.N.tmp`.
fn temporary_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}{TMP_SUFFIX}", std::process::id()))
}

/// Refuses to write `bytes` to `path` where a file holds other bytes there: a command that makes
/// a file anew writes over nothing but what it wrote itself before (a corpus a run was trained
/// on may stand there). `flag` names the option that chooses the place. Returns whether the same
/// bytes stand there already, in a file (read-only too), so that nothing need be written.
pub fn check_new_or_same(path: &Path, bytes: &[u8], flag: &str) -> anyhow::Result<bool> {
    if !path.exists() && !path.is_symlink() {
        return Ok(false);
    }
    let file = !path.is_symlink() && path.is_file();
    if file && std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(true);
    }
    check_replaceable(path).map_err(|e| anyhow::anyhow!("{e}, or give another {flag}"))?;
    anyhow::bail!(
        "{} exists and holds something else than what would be written there: \
         move it away (a run trained on it needs it to resume), or give another {flag}",
        path.display()
    )
}

/// Checks that `path` may be replaced by a file this program writes there: absent, or a regular
/// file the user may write. A symbolic link (even to the same bytes), a folder or a read-only file
/// is refused, saying what to do: what stands there is the user's to move.
pub fn check_replaceable(path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        anyhow::bail!(
            "{} is a symbolic link (to {}): this program replaces only files it wrote, never a link; move it away",
            path.display(),
            std::fs::read_link(path).unwrap_or_default().display()
        );
    }
    if !meta.is_file() {
        anyhow::bail!(
            "{} is a folder (or another thing that is not a file) where this program writes a file: move it away",
            path.display()
        );
    }
    if meta.permissions().readonly() {
        anyhow::bail!(
            "{} is read-only: make it writable to let this program write it again (chmod u+w), or move it away",
            path.display()
        );
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, flushed to disk,
/// then renamed over the target, whose permissions it keeps. What [`check_replaceable`] refuses
/// is left as it is. On failure (a full disk, say) the temporary file is removed and the target
/// is left as it was.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    check_replaceable(path)?;
    let tmp = temporary_path(path);
    let kept = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions());
    let written = (|| -> anyhow::Result<()> {
        let mut file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        if let Some(permissions) = kept {
            file.set_permissions(permissions)
                .with_context(|| format!("cannot set the permissions of {}", tmp.display()))?;
        }
        file.sync_all()
            .with_context(|| format!("cannot flush {}", tmp.display()))?;
        rename_over(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Renames `tmp` over `path`. On Windows a file that another process is reading cannot be
/// replaced for that moment ("Access denied": the page's list reading metrics.csv as the run
/// writes it, a viewer): the rename is tried again for about three seconds before it fails.
fn rename_over(tmp: &Path, path: &Path) -> anyhow::Result<()> {
    let mut waits = RENAME_WAITS_MS.iter();
    loop {
        match std::fs::rename(tmp, path) {
            Ok(()) => return Ok(()),
            Err(e) if cfg!(windows) && e.kind() == std::io::ErrorKind::PermissionDenied => {
                match waits.next() {
                    Some(&ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
                    None => anyhow::bail!(
                        "cannot move {} to {}: {e}; another program may hold {} open: close it and run the command again",
                        tmp.display(),
                        path.display(),
                        path.display()
                    ),
                }
            }
            Err(e) => anyhow::bail!("cannot move {} to {}: {e}", tmp.display(), path.display()),
        }
    }
}

/// The waits between the tries of [`rename_over`] (3.1 s in all).
const RENAME_WAITS_MS: [u64; 8] = [10, 20, 40, 80, 160, 320, 640, 1800];

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that holds the file open for a moment does not make the write fail (on Windows
    /// the rename over it is refused while it reads: CI's wine run of the page's test).
    #[test]
    fn a_file_held_open_by_a_reader_for_a_moment_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("metrics.csv");
        std::fs::write(&path, "old").unwrap();
        let reader = std::fs::File::open(&path).unwrap();
        let held = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(reader);
        });
        atomic_write(&path, b"new").unwrap();
        held.join().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[test]
    fn only_the_temporary_names_of_the_given_files_are_ours() {
        let ours = ["model.safetensors", "metrics.csv"];
        assert!(is_temporary_of(".model.safetensors.4242.0.tmp", &ours));
        assert!(is_temporary_of(".metrics.csv.1.17.tmp", &ours));
        for name in [
            ".notes.tmp",
            ".a.1.2.tmp",
            ".config.toml.1.2.tmp",        // not one of the files given
            ".model.safetensors.x.1.tmp",  // not a process id
            ".model.safetensors.1..tmp",   // no counter
            "model.safetensors.1.2.tmp",   // not hidden
            ".model.safetensors.1.2.tmp~", // not the suffix
        ] {
            assert!(!is_temporary_of(name, &ours), "{name}");
        }
        // The names this module writes are found by it, with the process that writes them.
        let tmp = temporary_path(Path::new("run/metrics.csv"));
        let name = tmp.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            temporary_of(name, &ours),
            Some(std::process::id()),
            "{name}"
        );
    }

    #[cfg(any(unix, windows))]
    #[test]
    fn a_process_that_runs_is_told_from_one_that_does_not() {
        assert!(process_runs(std::process::id()));
        assert!(!process_runs(999_999_999), "beyond any pid_max");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_written_over_keeps_its_permissions_and_what_is_not_ours_to_replace_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("poems.txt");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        atomic_write(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // A read-only file is the user's word: left as it is, saying so.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let err = atomic_write(&path, b"newer").unwrap_err();
        assert!(err.to_string().contains("is read-only"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A folder where a file goes.
        let folder = dir.path().join("loss.svg");
        std::fs::create_dir(&folder).unwrap();
        let err = atomic_write(&folder, b"x").unwrap_err();
        assert!(err.to_string().contains("is a folder"), "{err}");
        // A link to the very bytes that would be written is still a link: refused as one.
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = check_new_or_same(&link, b"new", "--out").unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert!(
            check_new_or_same(&path, b"new", "--out").unwrap(),
            "the same bytes"
        );
        let err = atomic_write(&link, b"new").unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert!(link.is_symlink());
    }
}
