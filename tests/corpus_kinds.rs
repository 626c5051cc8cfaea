//! Every kind of corpus through the binaries: running text and a line collection train, resume
//! exactly, evaluate, sample and answer the order question; the verse-only commands refuse them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const SAMPLE: &str = env!("CARGO_BIN_EXE_sample");
const SCORE: &str = env!("CARGO_BIN_EXE_score");
const HEADS: &str = env!("CARGO_BIN_EXE_heads_positions");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(bin: &str, args: &[&str]) -> Output {
    common::binary(bin)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn ok(bin: &str, args: &[&str]) -> String {
    let out = run(bin, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{bin} {args:?}: {stderr}");
    format!("{}{stderr}", String::from_utf8_lossy(&out.stdout))
}

/// A short play with blank lines between speeches, written with mixed line endings (LF, CRLF
/// and a lone CR), about 4,000 characters; it holds the English sentence pair of the order
/// question.
fn play() -> String {
    let speeches = [
        "ROMEO:\r\nBut soft, what light through yonder window breaks?\r\n",
        "JULIET:\nAy me! the dog bit the man.\n",
        "NURSE:\rAnon, anon! the man bit the dog.\r",
    ];
    (0..90)
        .map(|i| speeches[i % 3])
        .collect::<Vec<_>>()
        .join("\n")
}

/// 400 lines that are not regular verse (a ci's sentences), one per line, no blank line.
fn ci_lines() -> String {
    let sentences = [
        "明月几时有，把酒问青天。",
        "不知天上宫阙，今夕是何年。",
        "我欲乘风归去，又恐琼楼玉宇，高处不胜寒。",
    ];
    (0..400)
        .map(|i| format!("{}\n", sentences[i % 3]))
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Trains configs/tiny.toml's model on `corpus` for `steps`, evaluating every 10 steps.
fn train(corpus: &str, out: &Path, steps: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "--config",
        "configs/tiny.toml",
        "--corpus",
        corpus,
        "--max-iters",
        steps,
        "--eval-interval",
        "10",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    ok(TRAIN, &args)
}

fn metrics(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    // Leave out the timing columns: tokens per second and elapsed seconds.
    text.lines()
        .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn running_text_trains_resumes_exactly_samples_and_refuses_verse_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write(tmp.path(), "play.txt", &play());
    let (whole, half): (PathBuf, PathBuf) = (tmp.path().join("whole"), tmp.path().join("half"));
    let said = train(&corpus, &whole, "30", &[]);
    assert!(said.contains("running text"), "{said}");
    assert!(
        said.contains("--corpus-kind"),
        "says how to choose another kind: {said}"
    );
    train(&corpus, &half, "30", &["--stop-at", "20"]);
    ok(
        TRAIN,
        &["--resume", half.to_str().unwrap(), "--max-iters", "30"],
    );
    assert_eq!(
        metrics(&whole),
        metrics(&half),
        "a resumed run trains as an uninterrupted one"
    );
    let config = std::fs::read_to_string(whole.join("config.toml")).unwrap();
    assert!(
        config.contains("kind = \"text\""),
        "the run saves its kind: {config}"
    );

    // Running text goes on past its newlines: all 60 characters come out (and a last newline).
    let dir = whole.to_str().unwrap();
    let sample = [
        "--checkpoint",
        dir,
        "--num-samples",
        "1",
        "--max-new-tokens",
        "60",
    ];
    let text = String::from_utf8(run(SAMPLE, &sample).stdout).unwrap();
    assert_eq!(text.chars().count(), 61, "{text:?}");
    let out = run(SAMPLE, &[&sample[..], &["--json"]].concat());
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        line.get("verse").is_none(),
        "no verse score for a play: {line}"
    );

    for rule in [
        &["--form", "qijue"][..],
        &["--acrostic", "春"],
        &["--meter", "--form", "wujue"],
    ] {
        let mut args = vec!["--checkpoint", dir];
        args.extend(rule);
        let out = run(SAMPLE, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("trained on text"),
            "{rule:?}: {err}"
        );
    }
    let poems = write(
        tmp.path(),
        "poem.txt",
        "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n",
    );
    let out = run(SCORE, &[&poems, "--checkpoint", dir]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not regular verse"),
        "{err}"
    );

    // The order question, asked in English of a model whose vocabulary has no 白日依山尽.
    let said = ok(HEADS, &["--checkpoint", dir]);
    assert!(said.contains("the dog bit the man."), "{said}");
}

#[test]
fn a_line_collection_keeps_every_line_and_its_samples_end_at_a_newline() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write(tmp.path(), "ci.txt", &ci_lines());
    let out = tmp.path().join("ci");
    let said = train(&corpus, &out, "20", &[]);
    assert!(said.contains("one item per line"), "{said}");
    let sample = run(
        SAMPLE,
        &[
            "--checkpoint",
            out.to_str().unwrap(),
            "--num-samples",
            "4",
            "--max-new-tokens",
            "300",
        ],
    );
    let text = String::from_utf8(sample.stdout).unwrap();
    assert_eq!(text.lines().count(), 4, "one line per sample: {text}");

    // The same file read as verse has no poem; asked for explicitly, that is an error.
    let verse = tmp.path().join("verse");
    let out = run(
        TRAIN,
        &[
            "--config",
            "configs/tiny.toml",
            "--corpus",
            &corpus,
            "--corpus-kind",
            "verse",
            "--out",
            verse.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no valid poem"),
        "{err}"
    );
    // A resume that reads the corpus as another kind is refused: the kind decides the split.
    let out = run(
        TRAIN,
        &[
            "--resume",
            tmp.path().join("ci").to_str().unwrap(),
            "--max-iters",
            "30",
            "--corpus-kind",
            "text",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("keeps its kind"),
        "{err}"
    );
}

/// The ci of data/ci.txt to 浣溪沙 and 菩萨蛮, 150 of each.
fn two_tunes() -> String {
    let text = std::fs::read_to_string(root().join("data/ci.txt")).unwrap();
    ["【浣溪沙】", "【菩萨蛮】"]
        .iter()
        .flat_map(|tune| text.lines().filter(move |l| l.starts_with(tune)).take(150))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn ci_train_sample_to_a_tune_and_score_by_their_tunes_pattern() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = write(tmp.path(), "ci.txt", &two_tunes());
    let out = tmp.path().join("ci");
    train(&corpus, &out, "20", &[]);
    let dir = out.to_str().unwrap();
    let sample = [
        "--checkpoint",
        dir,
        "--num-samples",
        "3",
        "--tune",
        "浣溪沙",
    ];
    let said = ok(SAMPLE, &sample);
    assert!(
        said.contains("3 have their tune's pattern or a 又一体 (100 %)"),
        "{said}"
    );
    let written = String::from_utf8(run(SAMPLE, &sample).stdout).unwrap();
    // Read here, not by the scorer: 浣溪沙 is six sentences of seven, the fourth ending in ，.
    for line in written.lines() {
        let text = line
            .strip_prefix("【浣溪沙】")
            .unwrap_or_else(|| panic!("{line}"));
        let marks: String = text.chars().filter(|c| "，。、".contains(*c)).collect();
        let lengths: Vec<usize> = text
            .split(['，', '。', '、'])
            .filter(|s| !s.is_empty())
            .map(|s| s.chars().count())
            .collect();
        assert_eq!(
            (marks.as_str(), lengths),
            ("。。。，。。", vec![7; 6]),
            "{line}"
        );
    }
    let ci = write(tmp.path(), "samples.txt", &written);
    let scored = ok(SCORE, &[&ci, "--corpus", &corpus]);
    assert_eq!(
        scored.matches("浣溪沙: has the tune's pattern").count(),
        3,
        "{scored}"
    );

    let out = run(SAMPLE, &["--checkpoint", dir, "--tune", "水调哥头"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("水调歌头"),
        "the nearest names: {err}"
    );
    let out = run(
        SAMPLE,
        &["--checkpoint", dir, "--tune", "浣溪沙", "--form", "qijue"],
    );
    assert!(
        !out.status.success(),
        "a tune and a form exclude each other"
    );

    // The held-out real ci: the human baseline of the tunes' fit.
    let val = ok(SCORE, &["--val", "--corpus", &corpus]);
    assert!(val.contains("15 ci, 15 of a tune in the 词谱"), "{val}");
}
