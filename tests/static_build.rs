//! `web/build.sh RUN OUT` writes the static page into OUT only where OUT is new, empty, or an
//! earlier build of the script holding nothing else; anything else is refused before anything is
//! built or removed (these cases never reach the build).

#![cfg(unix)]

use std::path::Path;
use std::process::Command;

/// Runs web/build.sh with `args` in `cwd`: (success, stderr).
fn build(cwd: &Path, args: &[&str]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("web/build.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A folder that looks like a run to the script (the files it copies).
fn fake_run(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for file in ["config.toml", "tokenizer.json", "model.safetensors"] {
        std::fs::write(dir.join(file), file).unwrap();
    }
}

/// Every file under `dir` with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(files(&path));
        } else {
            all.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    all.sort();
    all
}

#[test]
fn the_static_build_refuses_a_folder_it_did_not_fill_and_removes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    fake_run(&victim.join("r"));
    std::fs::write(victim.join("notes.txt"), "mine").unwrap();
    let before = files(tmp.path());
    let refused = |args: &[&str], says: &str| {
        let (ok, err) = build(tmp.path(), args);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains("Compiling") && !err.contains("installing"),
            "{args:?}: built: {err}"
        );
        assert_eq!(files(tmp.path()), before, "{args:?} changed a file");
    };
    // The folder that holds the runs, the current folder, a folder of other files.
    refused(
        &["victim/r", "victim"],
        "is no earlier build of this script",
    );
    refused(&["victim/r", "."], "is no earlier build of this script");
    refused(&["victim/r", "victim/notes.txt"], "is not a folder");

    // An earlier build's folder with a file it did not write, or a link where its files go.
    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(dist.join("run")).unwrap();
    let manifest = r#"{"builder": "shige web/build.sh", "run": "r"}"#;
    std::fs::write(dist.join("manifest.json"), manifest).unwrap();
    std::fs::write(dist.join("run/mine.txt"), "mine").unwrap();
    let before = files(tmp.path());
    let (ok, err) = build(tmp.path(), &["victim/r", "dist"]);
    assert!(
        !ok && err.contains("run/mine.txt is not one of its files"),
        "{err}"
    );
    assert_eq!(files(tmp.path()), before);
    std::fs::remove_file(dist.join("run/mine.txt")).unwrap();
    std::os::unix::fs::symlink(victim.join("notes.txt"), dist.join("index.html")).unwrap();
    let (ok, err) = build(tmp.path(), &["victim/r", "dist"]);
    assert!(
        !ok && err.contains("index.html is not one of its files"),
        "{err}"
    );
    std::fs::remove_file(dist.join("index.html")).unwrap();

    // A file whose name holds a line break that ends like one of the build's; a folder reached
    // through a link, or named with a trailing slash.
    std::fs::write(dist.join("notes\nindex.html"), "mine").unwrap();
    let (ok, err) = build(tmp.path(), &["victim/r", "dist/"]);
    assert!(!ok && err.contains("is not one of its files"), "{err}");
    std::os::unix::fs::symlink(&dist, tmp.path().join("link")).unwrap();
    let (ok, err) = build(tmp.path(), &["victim/r", "link"]);
    assert!(
        !ok && err.contains("is not one of its files"),
        "through a link: {err}"
    );
    std::fs::remove_file(dist.join("notes\nindex.html")).unwrap();
    // A manifest that only mentions the script is not one of its manifests.
    let theirs = r#"{"mine": 1, "builder": "shige web/build.sh"}"#;
    std::fs::write(dist.join("manifest.json"), theirs).unwrap();
    let (ok, err) = build(tmp.path(), &["victim/r", "dist"]);
    assert!(!ok && err.contains("no manifest.json of one"), "{err}");
    std::fs::write(dist.join("manifest.json"), manifest).unwrap();

    // A run inside the folder its build would replace, a folder inside the run.
    fake_run(&dist.join("run"));
    let (ok, err) = build(tmp.path(), &["dist/run", "dist"]);
    assert!(!ok && err.contains("is inside the output folder"), "{err}");
    assert_eq!(
        std::fs::read(dist.join("run/config.toml")).unwrap(),
        b"config.toml"
    );
    let (ok, err) = build(tmp.path(), &["victim/r", "victim/r/site"]);
    assert!(!ok && err.contains("is inside the run"), "{err}");
    assert!(!victim.join("r/site").exists());
    // The same through an absolute path whose parents do not exist yet, and through a file.
    let deep = victim.join("r/new/site");
    let (ok, err) = build(tmp.path(), &["victim/r", deep.to_str().unwrap()]);
    assert!(!ok && err.contains("is inside the run"), "{err}");
    assert!(!victim.join("r/new").exists());
    let (ok, err) = build(tmp.path(), &["victim/r", "victim/r/config.toml/site"]);
    assert!(!ok && err.contains("is not a folder"), "{err}");
    let (ok, err) = build(tmp.path(), &["victim/r", "victim/new/../r/site"]);
    assert!(!ok && err.contains("without them"), "{err}");

    // Names that a command would take for options: a folder called - or -l holding a file.
    let dashed = tmp.path().join("d");
    for name in ["-l", "-"] {
        std::fs::create_dir_all(dashed.join(name)).unwrap();
        std::fs::write(dashed.join(name).join("keep.txt"), "mine").unwrap();
    }
    let run = tmp.path().join("victim/r");
    for name in ["-l", "-"] {
        let (ok, err) = build(&dashed, &[run.to_str().unwrap(), name]);
        assert!(!ok && err.contains("is no earlier build"), "{name}: {err}");
        assert!(
            err.starts_with("error: ") && err.lines().count() == 1,
            "{err}"
        );
    }
    assert_eq!(files(&dashed).len(), 2, "nothing written beside them");
}
