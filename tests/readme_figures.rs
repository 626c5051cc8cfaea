//! Figures that cannot drift: every measured figure in the README's prose (a number with a decimal
//! point or thousands commas, or one given in %, ×, s, minutes or tokens/s) must be a value of a
//! record its paragraph, bullet or table row links to (`docs/results/NAME.json`: a run's summary,
//! command, commit and machine, written by `bench/record.py`) or a shipped config it names
//! (`configs/NAME.toml`), or of the corpus's own record (`data.json`, checked here against the
//! shipped files). Commands, code blocks and shown program output are not figures.

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Numbers in the README that are not measurements, each with the word before it.
const NOT_FIGURES: [(&str, &str); 1] = [("2.15", "PyTorch")]; // a version

/// A figure as the README writes it.
#[derive(Debug)]
struct Figure {
    /// The digits as written, commas removed.
    digits: String,
    /// Digits after the decimal point.
    decimals: usize,
    /// What follows it: "%", "×", "s", "min" or "".
    unit: &'static str,
    /// The words around it, to say where it is.
    context: String,
    /// The word before it.
    before: String,
}

/// A paragraph, bullet or table row: its prose (inline code left out) and the files it names.
#[derive(Debug, Default)]
struct Block {
    prose: String,
    names: String,
}

/// The README's paragraphs, bullets and table rows, fenced code blocks left out.
fn blocks(readme: &str) -> Vec<Block> {
    let mut blocks = vec![Block::default()];
    let mut fenced = false;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let starts_block =
            line.trim().is_empty() || line.starts_with("- ") || line.starts_with('|');
        if starts_block && !blocks.last().is_some_and(|b| b.names.is_empty()) {
            blocks.push(Block::default());
        }
        if fenced || line.trim().is_empty() {
            continue;
        }
        let block = blocks.last_mut().expect("a block");
        block.names.push_str(line);
        block.names.push('\n');
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                block.prose.push(c);
            }
        }
        block.prose.push('\n');
        if line.starts_with('|') {
            blocks.push(Block::default());
        }
    }
    blocks.retain(|b| !b.names.is_empty());
    blocks
}

/// The files of `folder` with extension `ext` that `text` names (`folder/NAME.ext`).
fn named(text: &str, folder: &str, ext: &str) -> Vec<String> {
    text.split(folder)
        .skip(1)
        .filter_map(|rest| rest.split_once(ext))
        .map(|(name, _)| format!("{name}{ext}"))
        .filter(|name| {
            name.chars()
                .all(|c| c.is_alphanumeric() || "_-.".contains(c))
        })
        .collect()
}

/// The unit after position `i` of `chars` (spaces skipped), if it makes a number a figure.
fn unit_after(chars: &[char], mut i: usize) -> &'static str {
    while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\u{a0}') {
        i += 1;
    }
    let rest: String = chars[i.min(chars.len())..].iter().take(10).collect();
    let word_ends = |n: usize| {
        !rest
            .chars()
            .nth(n)
            .is_some_and(|c| c.is_alphanumeric() || c == '/')
    };
    if rest.starts_with('%') {
        "%"
    } else if rest.starts_with('×') {
        "×"
    } else if rest.starts_with("tokens/s") {
        "tokens/s"
    } else if rest.starts_with("minutes") || (rest.starts_with("min") && word_ends(3)) {
        "min"
    } else if rest.starts_with('s') && word_ends(1) {
        "s"
    } else {
        ""
    }
}

/// The figures of `text`.
fn figures(text: &str) -> Vec<Figure> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let joined = i > 0 && {
            let p = chars[i - 1];
            p.is_alphanumeric() || matches!(p, '.' | '-' | '_' | '/' | '^' | '=')
        };
        if !chars[i].is_ascii_digit() || joined {
            i += 1;
            continue;
        }
        let start = i;
        let (mut digits, mut decimals, mut commas) = (String::new(), 0, false);
        while i < chars.len() {
            let c = chars[i];
            let next_is_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() {
                digits.push(c);
                if digits.contains('.') {
                    decimals += 1;
                }
            } else if c == ',' && next_is_digit && !digits.contains('.') {
                commas = true;
            } else if c == '.' && next_is_digit && !digits.contains('.') {
                digits.push('.');
            } else {
                break;
            }
            i += 1;
        }
        let glued = chars.get(i).is_some_and(|c| c.is_alphabetic() && *c != '×');
        let unit = unit_after(&chars, i);
        if !glued && (decimals > 0 || commas || !unit.is_empty()) {
            let around = |a: usize, b: usize| chars[a..b].iter().collect::<String>();
            let before = around(start.saturating_sub(12), start);
            found.push(Figure {
                digits,
                decimals,
                unit,
                context: around(start.saturating_sub(40), (i + 20).min(chars.len())),
                before: before.split_whitespace().last().unwrap_or("").to_string(),
            });
        }
    }
    found
}

/// Every number in `value`, however deep.
fn numbers(value: &Value, out: &mut Vec<f64>) {
    match value {
        Value::Number(n) => out.extend(n.as_f64()),
        Value::Array(items) => items.iter().for_each(|v| numbers(v, out)),
        Value::Object(map) => map.values().for_each(|v| numbers(v, out)),
        _ => {}
    }
}

/// The recorded results by file name.
fn results() -> HashMap<String, Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results");
    std::fs::read_dir(&dir)
        .expect("docs/results")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into(), value)
        })
        .collect()
}

/// Whether the recorded value `v` is written as `figure`.
fn writes(figure: &Figure, v: f64) -> bool {
    let candidates = match figure.unit {
        "min" => vec![v, v / 60.0],
        "%" => vec![v, v * 100.0],
        _ => vec![v],
    };
    candidates
        .iter()
        .any(|c| format!("{c:.*}", figure.decimals) == figure.digits)
}

#[test]
fn every_figure_in_the_readme_is_a_recorded_result() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let results = results();
    for (name, value) in &results {
        for key in ["command", "commit", "machine", "recorded"] {
            assert!(value.get(key).is_some(), "docs/results/{name} has no {key}");
        }
    }
    let not_figures: HashSet<(&str, &str)> = NOT_FIGURES.into_iter().collect();
    let (mut unrecorded, mut checked) = (Vec::new(), 0);
    for block in blocks(&readme) {
        // What any paragraph may quote: the corpus; then the records and configs it names.
        let mut recorded = Vec::new();
        numbers(&results["data.json"], &mut recorded);
        for name in named(&block.names, "docs/results/", ".json") {
            let record = results.get(&name);
            assert!(
                record.is_some(),
                "README.md links to docs/results/{name}, which is missing"
            );
            numbers(record.expect("present"), &mut recorded);
        }
        for name in named(&block.names, "configs/", ".toml") {
            let text = std::fs::read_to_string(root.join("configs").join(&name)).expect(&name);
            let config: toml::Table = toml::from_str(&text).expect("a config");
            numbers(
                &serde_json::to_value(config).expect("as JSON"),
                &mut recorded,
            );
        }
        for f in figures(&block.prose) {
            checked += 1;
            let known = not_figures.contains(&(f.digits.as_str(), f.before.as_str()));
            if !known && !recorded.iter().any(|&v| writes(&f, v)) {
                let context = f.context.replace('\n', " ");
                unrecorded.push(format!("{}{} in \"…{context}…\"", f.digits, f.unit));
            }
        }
    }
    assert!(checked > 20, "the scan found only {checked} figures");
    assert!(
        unrecorded.is_empty(),
        "figures in README.md that no record its paragraph links to holds (record the run with bench/record.py and link docs/results/NAME.json, or correct the figure):\n{}",
        unrecorded.join("\n")
    );
}

#[test]
fn the_scan_finds_figures_and_leaves_commands_and_names() {
    let text = blocks(
        "See [it](docs/results/a.json) and `configs/b.toml`. It took 680 s and ended at 4.256, 83 % of 1,815 poems, 3.08× faster at 45,684 tokens/s in 11.3 minutes.\n\
         \nNot: `--max-iters 120`, x86-64, β2, H200, 2 cores, 4 layers, 2026-12-04, 2e-3.\n```\n1.234 s\n```\n",
    );
    assert_eq!(text.len(), 2, "two paragraphs: {text:?}");
    assert_eq!(named(&text[0].names, "docs/results/", ".json"), ["a.json"]);
    assert_eq!(named(&text[0].names, "configs/", ".toml"), ["b.toml"]);
    let written: Vec<(String, &str)> = figures(&text[0].prose)
        .into_iter()
        .chain(figures(&text[1].prose))
        .map(|f| (f.digits, f.unit))
        .collect();
    let expected = [
        ("680", "s"),
        ("4.256", ""),
        ("83", "%"),
        ("1815", ""),
        ("3.08", "×"),
        ("45684", "tokens/s"),
        ("11.3", "min"),
    ];
    assert_eq!(
        written,
        expected.map(|(d, u)| (d.to_string(), u)),
        "from {text:?}"
    );
    let f = |digits: &str, decimals, unit| Figure {
        digits: digits.into(),
        decimals,
        unit,
        context: String::new(),
        before: String::new(),
    };
    assert!(writes(&f("4.256", 3, ""), 4.25593));
    assert!(!writes(&f("4.256", 3, ""), 4.2549));
    assert!(writes(&f("11.3", 1, "min"), 680.0));
    assert!(writes(&f("83", 0, "%"), 0.83));
}

/// The corpus's figures, counted from the shipped files.
#[test]
fn the_recorded_corpus_figures_are_the_shipped_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |name: &str| std::fs::read_to_string(root.join(name)).expect(name);
    let poems = read("data/poems.txt");
    let lines: Vec<&str> = poems.lines().filter(|l| !l.is_empty()).collect();
    let mut counts: HashMap<char, f64> = HashMap::new();
    poems
        .chars()
        .for_each(|c| *counts.entry(c).or_default() += 1.0);
    let total: f64 = counts.values().sum();
    let entropy: f64 = counts.values().map(|n| -n / total * (n / total).ln()).sum();
    let distinct = counts.keys().filter(|&&c| c != '\n').count();
    let ci = read("data/ci.txt")
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    let data = &results()["data.json"]["figures"];
    assert_eq!(data["poems"], lines.len());
    assert_eq!(
        data["characters"],
        lines.iter().map(|l| l.chars().count()).sum::<usize>()
    );
    assert_eq!(data["distinct_characters"], distinct);
    assert_eq!(data["ci"], ci);
    let recorded = data["unigram_entropy_nats"].as_f64().expect("a number");
    assert!(
        (recorded - entropy).abs() < 5e-3,
        "{recorded} against {entropy}"
    );
}
