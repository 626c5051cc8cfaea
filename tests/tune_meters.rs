//! The 词谱 with tones and rhymes (`data/cipu_tones.tsv`) and `--tune X --meter`: every ci written
//! keeps its tune's sure tones and rhymes every rhyme position in one 部 of the 词林正韵, checked
//! here with this file's own reading of the shipped tables, not the sampler's.

mod common;

use rand::SeedableRng;
use shige::data::CharTokenizer;
use shige::sample::{tune_start, Generation, Generator, Sampling};
use shige::verse::ci_score::score_ci_meter;
use shige::verse::cilin::Cilin;
use shige::verse::tune_meters::TuneMeters;
use shige::verse::tunes::split_tune;
use shige::verse::{Tables, Tunes};
use std::collections::{HashMap, HashSet};

/// The data lines of a shipped table: its tab-separated fields.
fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').collect())
}

/// One tune as this test reads cipu_tones.tsv: its rhyme class and, per sentence, each position's
/// tone (平, 仄 or 中) and whether its end rhymes.
struct Reading {
    class: String,
    sentences: Vec<(Vec<char>, bool)>,
}

fn read_cipu_tones() -> HashMap<String, Reading> {
    let text = common::root_file("data/cipu_tones.tsv");
    rows(&text)
        .map(|f| {
            let mut sentences: Vec<(Vec<char>, bool)> = Vec::new();
            let mut tones = Vec::new();
            for c in f[3].chars() {
                match c {
                    '平' | '仄' | '中' => tones.push(c),
                    '韵' => sentences.last_mut().unwrap().1 = true,
                    _ => sentences.push((std::mem::take(&mut tones), false)),
                }
            }
            (
                f[0].to_string(),
                Reading {
                    class: f[2].to_string(),
                    sentences,
                },
            )
        })
        .collect()
}

#[test]
fn the_shipped_tables_parse_and_the_tones_are_learned_again_from_the_ci() {
    let meters = TuneMeters::shipped();
    assert!(
        meters.all().len() >= 20,
        "{} tunes with tones",
        meters.all().len()
    );
    let ci = common::root_file("data/ci.txt");
    let pairs = ci.lines().filter_map(split_tune);
    let learned = TuneMeters::learn(
        pairs,
        Tunes::shipped(),
        (Tables::shipped(), Cilin::shipped()),
    );
    assert_eq!(learned.to_tsv(), common::root_file("data/cipu_tones.tsv"));
    // The book's rhymes for two tunes: 浣溪沙 rhymes 平 on sentences 1, 2, 3, 5 and 6; 满江红 入.
    let reading = read_cipu_tones();
    let huanxisha = &reading["浣溪沙"];
    let rhyming: Vec<usize> = (0..6).filter(|&s| huanxisha.sentences[s].1).collect();
    assert_eq!(
        (huanxisha.class.as_str(), rhyming),
        ("平", vec![0, 1, 2, 4, 5])
    );
    assert_eq!(reading["满江红"].class, "入");
}

#[test]
fn the_real_ci_keep_their_tunes_tones() {
    let ci = common::root_file("data/ci.txt");
    let tables = (Tables::shipped(), Cilin::shipped());
    let scores: Vec<_> = ci
        .lines()
        .filter_map(|l| score_ci_meter(l, TuneMeters::shipped(), tables))
        .collect();
    let fit = scores.iter().map(|s| s.tone_fit()).sum::<f64>() / scores.len() as f64;
    assert!(
        scores.len() > 9_000 && fit > 0.95,
        "{} ci, tone fit {fit}",
        scores.len()
    );
}

#[test]
fn every_ci_written_with_the_meter_keeps_its_tunes_tones_and_rhymes() {
    let tones: HashMap<char, String> = {
        let text = common::root_file("data/tones.tsv");
        rows(&text)
            .map(|f| (f[0].chars().next().unwrap(), f[1].to_string()))
            .collect()
    };
    let cilin: HashMap<char, Vec<String>> = {
        let text = common::root_file("data/cilin.tsv");
        rows(&text)
            .map(|f| {
                (
                    f[0].chars().next().unwrap(),
                    f[1].split(',').map(String::from).collect(),
                )
            })
            .collect()
    };
    let reading = read_cipu_tones();
    let ci = common::root_file("data/ci.txt");
    let tokenizer = CharTokenizer::from_text(&ci).unwrap();
    let model = common::random_model(&tokenizer, 9);
    let mut generator = Generator::new(&model);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    for meter in TuneMeters::shipped().all().iter().take(20) {
        let tune = Tunes::shipped().get(&meter.name).unwrap();
        let start = tune_start(&tokenizer, (tune, Some(meter)), "", 300).unwrap();
        let gen = Generation::new(300, Sampling::with_temperature(1.0), Some(start.opening[0]));
        let written = generator
            .write(&start, &gen, &mut rng, &mut |_| {})
            .unwrap();
        let text = tokenizer.decode(&written).unwrap();
        let own = &reading[&meter.name];
        let sentences: Vec<Vec<char>> = text
            .trim_end()
            .split(['，', '、', '。'])
            .filter(|s| !s.is_empty())
            .map(|s| s.chars().collect())
            .collect();
        assert_eq!(
            sentences.len(),
            own.sentences.len(),
            "{}: {text}",
            meter.name
        );
        let mut finals = Vec::new();
        for (chars, (slots, rhymes)) in sentences.iter().zip(&own.sentences) {
            assert_eq!(
                chars.len(),
                slots.len(),
                "{}: a sentence's length in {text}",
                meter.name
            );
            for (c, slot) in chars.iter().zip(slots) {
                let tone = tones.get(c).map(String::as_str);
                let fits = match slot {
                    '中' => true,
                    '平' => matches!(tone, Some("平" | "两")),
                    _ => matches!(tone, Some("仄" | "两")),
                };
                assert!(fits, "{}: {c} ({tone:?}) where {slot}: {text}", meter.name);
            }
            if *rhymes {
                finals.push(*chars.last().unwrap());
            }
        }
        let distinct: HashSet<&char> = finals.iter().collect();
        assert_eq!(
            distinct.len(),
            finals.len(),
            "{}: a repeated rhyme in {text}",
            meter.name
        );
        let bu_of = |c: &char| -> HashSet<String> {
            cilin
                .get(c)
                .into_iter()
                .flatten()
                .filter(|b| b.ends_with(&own.class))
                .cloned()
                .collect()
        };
        let shared = finals
            .iter()
            .map(bu_of)
            .reduce(|a, b| a.intersection(&b).cloned().collect());
        assert!(
            shared.is_none_or(|s| !s.is_empty()),
            "{}: rhymes {finals:?} share no 部 in {text}",
            meter.name
        );
    }
}
