//! Every measured figure is bound to the field of the record it comes from. In the README and in
//! the summaries that open docs/performance.md and docs/experiments.md ("## What holds today"), a
//! figure is written as a link to its field, `[4.2431](docs/results/default.json#summary.val_loss_whole)`,
//! and checked against that field alone: its digits rounded as written, a machine's numbers among
//! its record's. A paragraph, list item or table row that binds a figure binds every number in its
//! prose (settings too, or they go in code), and no prose anywhere holds a number that looks
//! measured (decimals, %, ×, seconds, nats, tokens/s) without its field. Code and commands are not
//! figures. Each record says where it comes from: the command that wrote it, or what it was
//! transcribed from.

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// What the test reads: the README whole, and the summary of each doc.
const SOURCES: [(&str, Option<&str>); 3] = [
    ("README.md", None),
    ("docs/performance.md", Some("## What holds today")),
    ("docs/experiments.md", Some("## What holds today")),
];

/// Where records live; a bound figure links here (from docs/, as `results/NAME.json#field`).
const RECORDS: &str = "results/";

/// The record a link's `target` names, relative to the records' folder, if it binds a field:
/// `docs/results/default.json#summary.steps` (or, from docs/, `results/…`).
fn record_target(target: &str) -> Option<&str> {
    let target = target.strip_prefix("docs/").unwrap_or(target);
    target.strip_prefix(RECORDS).filter(|t| t.contains('#'))
}

/// Words after a number that make it a measurement.
const UNITS: [&str; 11] = [
    "s", "ms", "minutes", "min", "nats", "tokens/s", "MB", "GB", "kB", "GFLOP/s", "×",
];

/// A paragraph, list item or table row of prose, with where it starts.
#[derive(Debug)]
struct Unit {
    text: String,
    place: String,
}

/// The prose units of `markdown` (fenced code left out), named after `file`.
fn units(file: &str, markdown: &str) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    let (mut fenced, mut open) = (false, false);
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            (fenced, open) = (!fenced, false);
            continue;
        }
        let starts =
            line.starts_with("- ") || line.starts_with('|') || line.starts_with('#') || !open;
        if fenced || line.trim().is_empty() {
            open = false;
            continue;
        }
        if starts {
            units.push(Unit {
                text: String::new(),
                place: format!("{file}:{}", n + 1),
            });
        }
        let unit = units.last_mut().expect("a unit");
        unit.text.push_str(line);
        unit.text.push('\n');
        open = !line.starts_with('|') && !line.starts_with('#');
    }
    units
}

/// `text` without its code spans.
fn without_code(text: &str) -> String {
    text.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The links of `text` (code spans left out): (link text, target).
fn links(text: &str) -> Vec<(String, String)> {
    let text = without_code(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else { break };
        let target = &after[close + 2..];
        let Some(end) = target.find(')') else { break };
        found.push((after[..close].to_string(), target[..end].to_string()));
        rest = &target[end..];
    }
    found
}

/// `text` without code spans and links: the prose a reader sees, less what is bound.
fn bare_prose(text: &str) -> String {
    let mut prose = without_code(text);
    for (shown, target) in links(text) {
        prose = prose.replacen(&format!("[{shown}]({target})"), " ", 1);
    }
    prose
}

/// A number as written: its value and its digits after the decimal point.
fn number(word: &str) -> Option<(f64, usize)> {
    let word = word.trim_end_matches(['%', '×']).replace(',', "");
    let word = word
        .strip_prefix('−')
        .map_or(word.clone(), |w| format!("-{w}"));
    let digits = word.trim_start_matches(['-', '+']);
    let numeric = digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.');
    let value = word.parse::<f64>().ok().filter(|_| numeric)?;
    Some((value, digits.split_once('.').map_or(0, |(_, d)| d.len())))
}

/// The words of `prose` that are numbers, each with the word after it.
fn number_words(prose: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = prose.split_whitespace().collect();
    let strip = |w: &str| {
        w.trim_matches(['(', ')', '[', ']', ',', ';', ':', '.', '!', '?', '"', '*'])
            .to_string()
    };
    (0..words.len())
        .map(|i| {
            (
                strip(words[i]),
                words.get(i + 1).map_or(String::new(), |w| strip(w)),
            )
        })
        .filter(|(word, _)| number(word).is_some())
        .collect()
}

/// The value at `path` (dot-separated keys and indices) in `record`.
fn field<'a>(record: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(record, |value, key| match key.parse::<usize>() {
            Ok(i) if value.is_array() => value.get(i),
            _ => value.get(key),
        })
}

/// Every number in `value`, written as JSON.
fn numbers_in(value: &Value) -> Vec<f64> {
    let text = value.to_string();
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Whether `shown` (a link's text) writes `value`: its first number rounded as written (an object,
/// such as a machine, holding every number shown).
fn writes(shown: &str, value: &Value) -> Result<(), String> {
    let shown_numbers: Vec<(f64, usize)> = number_words(shown)
        .iter()
        .filter_map(|(w, _)| number(w))
        .collect();
    match value {
        Value::Number(n) => {
            let v = n.as_f64().expect("a number");
            let &(written, decimals) = shown_numbers
                .first()
                .ok_or(format!("`{shown}` shows no number for the value {v}"))?;
            let scale = 10f64.powi(decimals as i32);
            let rounded = (v * scale).round() / scale;
            match (rounded - written).abs() <= 1e-9 * written.abs().max(1.0) {
                true => Ok(()),
                false => Err(format!("`{shown}` but the field holds {v}")),
            }
        }
        Value::String(_) | Value::Object(_) | Value::Array(_) => {
            let held = numbers_in(value);
            match shown_numbers.iter().find(|(n, _)| !held.contains(n)) {
                None => Ok(()),
                Some((n, _)) => Err(format!(
                    "`{shown}` shows {n}, which its field does not hold: {value}"
                )),
            }
        }
        other => Err(format!("`{shown}` is bound to {other}, which is no figure")),
    }
}

/// The links of `unit` that bind a record's field: (link text, target).
fn bound_links(unit: &Unit) -> Vec<(String, String)> {
    links(&unit.text)
        .into_iter()
        .filter(|(_, target)| record_target(target).is_some())
        .collect()
}

/// Each of `bound`, the bound links of `unit`, whose field its record does not hold or holds
/// otherwise than shown.
fn wrong_links(
    unit: &Unit,
    bound: &[(String, String)],
    records: &HashMap<String, Value>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (shown, target) in bound {
        let (file, path) = record_target(target)
            .and_then(|t| t.split_once('#'))
            .expect("a field");
        let value = records
            .get(file)
            .ok_or(format!("no record {file}"))
            .and_then(|record| field(record, path).ok_or(format!("no field {path} in {file}")))
            .and_then(|value| writes(shown, value));
        if let Err(why) = value {
            wrong.push(format!("{}: {target}: {why}", unit.place));
        }
    }
    wrong
}

/// Every problem with the figures of `units`: a bound figure its field does not hold (or a field
/// that is not there), a number left unbound beside a bound one, a measured-looking number with
/// no field at all.
fn problems(units: &[Unit], records: &HashMap<String, Value>) -> Vec<String> {
    let mut problems = Vec::new();
    for unit in units {
        let bound = bound_links(unit);
        problems.extend(wrong_links(unit, &bound, records));
        for (word, next) in number_words(&bare_prose(&unit.text)) {
            let measured = word.contains('.')
                || word.ends_with(['%', '×'])
                || UNITS.contains(&next.as_str())
                || next == "%";
            if !bound.is_empty() || measured {
                problems.push(format!(
                    "{}: `{word} {next}` has no field: write it as [{word}](docs/results/NAME.json#field), or put a setting in code",
                    unit.place
                ));
            }
        }
    }
    problems
}

/// The records of docs/results, by file name.
fn records() -> HashMap<String, Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(RECORDS);
    std::fs::read_dir(&dir)
        .expect("docs/results")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("a record");
            let name = e.file_name().to_string_lossy().into_owned();
            let value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{name}: {err}"));
            (name, value)
        })
        .collect()
}

/// The units of each source: the README whole, a doc's summary section alone.
fn sources() -> Vec<Unit> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for (file, section) in SOURCES {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let text = match section {
            None => text,
            Some(heading) => {
                let start = text
                    .find(heading)
                    .unwrap_or_else(|| panic!("{file} has no {heading}"));
                let rest = &text[start + heading.len()..];
                rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
            }
        };
        all.extend(units(file, &text));
    }
    all
}

#[test]
fn every_figure_is_its_records_field() {
    let (units, records) = (sources(), records());
    let bound = units
        .iter()
        .flat_map(|u| links(&u.text))
        .filter(|(_, t)| record_target(t).is_some())
        .count();
    assert!(
        bound > 20,
        "the README and the summaries bind their figures: {bound}"
    );
    let problems = problems(&units, &records);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Past the summaries, every link of docs/ to a record's field shows that field (the dated
/// sections' tables and prose; their unbound numbers are not checked).
#[test]
fn every_linked_figure_in_the_docs_is_its_records_field() {
    let (root, records) = (Path::new(env!("CARGO_MANIFEST_DIR")), records());
    let mut problems = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("docs"))
        .expect("docs")
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let name = format!("docs/{}", entry.file_name().to_string_lossy());
        let text = std::fs::read_to_string(&path).expect(&name);
        for unit in units(&name, &text) {
            let bound = bound_links(&unit);
            checked += bound.len();
            problems.extend(wrong_links(&unit, &bound, &records));
        }
    }
    assert!(checked > 80, "docs/ binds its figures: {checked}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each row of the speedrun's record (docs/results/speedrun.json) is its run's record: its loss
/// the record's, its difference that loss less its reference's, rounded to 4 places.
#[test]
fn the_speedrun_rows_are_their_runs_records() {
    let records = records();
    let speedrun = &records["speedrun.json"];
    let rows = speedrun["rows"].as_array().expect("rows");
    assert!(rows.len() >= 10, "{} rows", rows.len());
    let loss = |name: &Value| {
        let name = name.as_str().expect("a record's name");
        let record = records
            .get(name)
            .unwrap_or_else(|| panic!("no record {name}"));
        record["summary"]["val_loss_whole"].as_f64().expect(name)
    };
    for row in rows {
        let (own, reference) = (loss(&row["record"]), loss(&row["reference"]));
        assert_eq!(row["val_loss_whole"].as_f64(), Some(own), "{row}");
        if let Some(against) = row["against_base"].as_f64() {
            let difference = ((own - reference) * 1e4).round() / 1e4;
            assert!(
                (against - difference).abs() < 1e-9,
                "{against} against {difference}: {row}"
            );
        }
    }
}

/// The check fails on a planted wrong figure, on a figure bound to another field, on a figure
/// with no field, and on an unbound number beside a bound one.
#[test]
fn a_wrong_moved_or_unbound_figure_fails() {
    let records = HashMap::from([(
        "r.json".to_string(),
        serde_json::json!({"summary": {"loss": 4.2431, "tokens": 39200.9}, "free": {"rhyme": 81, "real": 87},
            "machine": {"model_name": "Intel(R) Xeon(R) Processor", "family": 6, "model": 207, "cores": 2}}),
    )]);
    let check = |text: &str| problems(&units("t.md", text), &records);
    let good = "The run ends at [4.2431](docs/results/r.json#summary.loss) at [39,201 tokens/s](docs/results/r.json#summary.tokens) \
                on [Intel Xeon (family 6 model 207), 2 cores](docs/results/r.json#machine), rhyming in \
                [81 %](docs/results/r.json#free.rhyme) with `--seed 7` and `dropout = 0.05`.\n\n4 or 8 lines of 5 or 7.\n";
    assert_eq!(check(good), Vec::<String>::new());
    for (bad, says) in [
        (
            "ends at [4.2531](docs/results/r.json#summary.loss).",
            "the field holds 4.2431",
        ),
        (
            "rhymes in [81 %](docs/results/r.json#free.real).",
            "the field holds 87",
        ),
        (
            "ends at [4.2431](docs/results/r.json#summary.lost).",
            "no field summary.lost",
        ),
        ("on [Zen 5](docs/results/r.json#machine).", "shows 5"),
        ("ends at 4.2431 nats.", "has no field"),
        ("rhymes in 81 % of poems.", "has no field"),
        ("ran at 1.9× the speed", "has no field"),
        ("took 331 s in all", "has no field"),
        (
            "ends at [4.2431](docs/results/r.json#summary.loss) after 12,000 steps.",
            "`12,000 steps` has no field",
        ),
    ] {
        let found = check(bad);
        assert!(found.iter().any(|p| p.contains(says)), "{bad}: {found:?}");
    }
}

/// Each record says where it comes from: written by a command of this repository
/// (`written_by`, or the fields `bench/record.py` wrote before it said so and a commit it
/// resolved), or `transcribed_from` what it was copied from.
#[test]
fn every_record_says_where_it_comes_from() {
    for (name, record) in records() {
        let written = record["written_by"].as_str().is_some_and(|w| !w.is_empty());
        let keys = [
            "command", "commit", "machine", "recorded", "summary", "config",
        ];
        let commit = record["commit"].as_str().unwrap_or("");
        let by_record_py = keys.iter().all(|k| record.get(k).is_some())
            && commit.len() == 40
            && commit.chars().all(|c| c.is_ascii_hexdigit());
        let transcribed = record["transcribed_from"]
            .as_str()
            .is_some_and(|t| !t.is_empty());
        assert!(
            written || by_record_py || transcribed,
            "{name} says neither who wrote it nor what it was transcribed from"
        );
    }
}

/// No record holds a path of the machine it was made on: paths are the repository's (or a run
/// folder's name).
#[test]
fn no_record_holds_an_absolute_path() {
    fn strings(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
            Value::Object(map) => map.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    for (name, record) in records() {
        let mut found = Vec::new();
        strings(&record, &mut found);
        let absolute: Vec<_> = found
            .iter()
            .filter(|s| s.starts_with('/') && s.len() > 1 && !s.contains(' '))
            .collect();
        assert!(absolute.is_empty(), "{name} holds {absolute:?}");
    }
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
    let data = &records()["data.json"]["figures"];
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
