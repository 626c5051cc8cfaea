//! Loading a trained run and sampling from it: determinism, the key/value cache, top-k/top-p,
//! forms and acrostics, and the errors for settings that cannot work.

mod common;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::Position;
use shige::data::poem::{regular_form, Form};
use shige::data::tokenizer::NEWLINE;
use shige::data::CharTokenizer;
use shige::model::Gpt;
use shige::ops::WeightFormat;
use shige::sample::{
    generate, is_well_formed, poem_start, Generation, Generator, Opening, PoemConstraint,
    SampleError, Sampling,
};
use shige::train::load::{load_run, LoadedRun};
use shige::train::run_dir::TOKENIZER_FILE;
use shige::verse::{score_poem, Tables};
use std::path::Path;

fn tiny_run(dir: &Path) -> LoadedRun {
    let mut cfg = common::tiny_config();
    cfg.train.max_iters = 20;
    common::run(&cfg, dir, false, None).unwrap();
    load_run(dir).unwrap()
}

/// Why `sample` and the page refuse to start a poem from `prompt` under `rules` (form, acrostic,
/// meter), or Ok.
fn refusal(
    tokenizer: &CharTokenizer,
    prompt: &str,
    rules: (Option<Form>, &str, bool),
    max_new_tokens: usize,
) -> Result<(), String> {
    poem_start(tokenizer, &Opening::Plain, prompt, rules, max_new_tokens)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn one_seed_gives_the_same_text_and_tokens_stream_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let prompt = run.tokenizer.encode("\n白日").unwrap();
    let draw = |seed, sampling| {
        let mut streamed = Vec::new();
        let gen = Generation::new(30, sampling, None);
        let ids = generate(&run.model, &prompt, &gen, &mut rng(seed), &mut |id| {
            streamed.push(id)
        })
        .unwrap();
        assert_eq!(ids, streamed, "every token is streamed, in order");
        ids
    };
    let warm = Sampling::with_temperature(0.8);
    assert_eq!(draw(3, warm), draw(3, warm));
    assert_ne!(draw(3, warm), draw(4, warm));
    assert_eq!(
        draw(0, Sampling::GREEDY),
        draw(1, Sampling::GREEDY),
        "greedy ignores the seed"
    );
    let top_1 = Sampling {
        top_k: Some(1),
        ..Sampling::with_temperature(1.5)
    };
    assert_eq!(
        draw(5, top_1),
        draw(0, Sampling::GREEDY),
        "top-k 1 is greedy"
    );
    let tiny_p = Sampling {
        top_p: Some(1e-9),
        ..Sampling::with_temperature(1.5)
    };
    assert_eq!(
        draw(5, tiny_p),
        draw(0, Sampling::GREEDY),
        "a tiny top-p is greedy"
    );
}

#[test]
fn top_k_and_top_p_draw_only_from_the_kept_tokens() {
    // Probabilities ∝ e^logit: 0.5, 0.3, 0.15, 0.05.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let count = |sampling: Sampling| {
        let mut seen = [0usize; 4];
        let mut r = rng(9);
        for _ in 0..2000 {
            seen[sampling.draw(&logits, &mut r) as usize] += 1;
        }
        seen
    };
    let seen = count(Sampling::with_temperature(1.0));
    assert!(
        seen.iter().all(|&n| n > 0),
        "plain sampling reaches every token: {seen:?}"
    );
    let top_2 = count(Sampling {
        top_k: Some(2),
        ..Sampling::with_temperature(1.0)
    });
    assert_eq!(top_2[2] + top_2[3], 0, "{top_2:?}");
    assert!(
        top_2[1] > 500,
        "the second token keeps its share: {top_2:?}"
    );
    let nucleus = count(Sampling {
        top_p: Some(0.9),
        ..Sampling::with_temperature(1.0)
    });
    assert_eq!(
        nucleus[3], 0,
        "0.5 + 0.3 + 0.15 ≥ 0.9 drops the last: {nucleus:?}"
    );
    assert!(nucleus[2] > 0, "{nucleus:?}");
    let masked = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
    let mut r = rng(1);
    for _ in 0..200 {
        assert!(Sampling::with_temperature(2.0).draw(&masked, &mut r) % 2 == 1);
    }
}

#[test]
fn plain_sampling_draws_each_token_in_proportion_over_a_large_vocabulary() {
    // 300 tokens (several of the blocks the draw skips at once): weights 1..=4 in turn, every
    // seventh token masked.
    let weight = |i: usize| if i % 7 == 3 { 0.0 } else { (1 + i % 4) as f64 };
    let logits: Vec<f32> = (0..300).map(|i| (weight(i) as f32).ln()).collect();
    let total: f64 = (0..300).map(weight).sum();
    let draws = 300_000;
    let mut seen = vec![0usize; 300];
    let mut r = rng(11);
    for _ in 0..draws {
        seen[Sampling::with_temperature(1.0).draw(&logits, &mut r) as usize] += 1;
    }
    for (i, &n) in seen.iter().enumerate() {
        let p = weight(i) / total;
        let expected = p * draws as f64;
        let sigma = (expected * (1.0 - p)).sqrt();
        assert!(
            (n as f64 - expected).abs() <= 5.0 * sigma,
            "token {i}: drawn {n} times, expected {expected:.0} ± {sigma:.0}"
        );
    }
}

#[test]
fn bad_sampling_settings_are_refused_with_what_to_do() {
    let bad = [
        Sampling::with_temperature(-0.5),
        Sampling::with_temperature(f64::NAN),
        Sampling {
            top_k: Some(0),
            ..Sampling::GREEDY
        },
        Sampling {
            top_p: Some(0.0),
            ..Sampling::GREEDY
        },
        Sampling {
            top_p: Some(1.5),
            ..Sampling::GREEDY
        },
    ];
    for s in bad {
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("must") || err.contains("give 1 or more"),
            "{err}"
        );
    }
    assert!(Sampling {
        top_k: Some(1),
        top_p: Some(1.0),
        ..Sampling::GREEDY
    }
    .validate()
    .is_ok());
}

#[test]
fn cached_and_uncached_decoding_agree_for_every_scheme() {
    let vocab = 40;
    for position in Position::ALL {
        let cfg = common::small_config(vocab, 2, position); // block_size 16
        let (model, _) = Gpt::seeded(&cfg, 11, &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..12).map(|i| (i * 7 % vocab) as u32).collect();
        // Greedy and sampled decoding, past block_size (learned positions crop the context); the
        // cached steps with the exact weights (f16's are checked in tests/engine.rs).
        for sampling in [Sampling::GREEDY, Sampling::with_temperature(1.0)] {
            let decode = |use_cache| {
                let gen = Generation {
                    use_cache,
                    ..Generation::new(30, sampling, None)
                };
                Generator::with_weights(&model, WeightFormat::F32)
                    .generate(&ids[..5], &gen, &mut rng(2), &mut |_| {})
                    .unwrap()
            };
            let cached = decode(true);
            assert_eq!(cached.len(), 30);
            assert_eq!(cached, decode(false), "{position} at {sampling:?}");
        }
    }
}

#[test]
fn a_reused_generator_gives_what_fresh_generations_give() {
    for position in [Position::Learned, Position::Rope] {
        let cfg = common::small_config(40, 2, position); // block_size 16: learned positions crop
        let (model, _) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
        let gen = Generation::new(30, Sampling::with_temperature(1.0), None);
        let mut generator = Generator::new(&model);
        let (mut fresh_rng, mut reused_rng) = (rng(3), rng(3));
        for prompt in [&[1u32, 2, 3][..], &[7], &[4, 4]] {
            let fresh = generate(&model, prompt, &gen, &mut fresh_rng, &mut |_| {}).unwrap();
            let reused = generator
                .generate(prompt, &gen, &mut reused_rng, &mut |_| {})
                .unwrap();
            assert_eq!(reused, fresh, "{position}, prompt {prompt:?}");
        }
    }
}

#[test]
fn threads_sharing_one_prepared_generator_each_get_what_a_fresh_generation_gives() {
    let cfg = common::small_config(40, 2, Position::Rope);
    let (model, _) = Gpt::seeded(&cfg, 5, &Device::Cpu).unwrap();
    let gen = Generation::new(40, Sampling::with_temperature(1.0), None);
    let mut shared = Generator::new(&model);
    let unprepared = shared.generate_prepared(&[1], &gen, &mut rng(0), &mut |_| {});
    assert!(unprepared.is_err(), "the cache without packed weights");
    shared.prepare().unwrap();
    let shared = &shared;
    let drawn: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|seed| {
                let gen = &gen;
                scope.spawn(move || {
                    let prompt = [seed as u32 + 1];
                    (0..5)
                        .flat_map(|_| {
                            shared
                                .generate_prepared(&prompt, gen, &mut rng(seed), &mut |_| {})
                                .unwrap()
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (seed, got) in drawn.iter().enumerate() {
        let prompt = [seed as u32 + 1];
        let fresh = generate(&model, &prompt, &gen, &mut rng(seed as u64), &mut |_| {}).unwrap();
        assert_eq!(got, &fresh.repeat(5), "thread {seed}");
    }
}

#[test]
fn every_form_comes_out_exact_and_acrostics_begin_the_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let newline = run.tokenizer.id(NEWLINE).unwrap();
    let poems = |form: Option<Form>, acrostic: &str, prompt: &str| -> Vec<String> {
        let start = poem_start(
            &run.tokenizer,
            &Opening::Plain,
            prompt,
            (form, acrostic, false),
            120,
        )
        .unwrap();
        let (start, constraint) = (start.ids(), start.constraint);
        let gen = Generation {
            constraint: constraint.as_ref(),
            ..Generation::new(120, Sampling::with_temperature(0.8), Some(newline))
        };
        (0..4)
            .map(|seed| {
                let ids = generate(&run.model, &start, &gen, &mut rng(seed), &mut |_| {}).unwrap();
                assert_eq!(ids.last(), Some(&newline), "the form ends the poem");
                format!("{prompt}{}", run.tokenizer.decode(&ids).unwrap().trim_end())
            })
            .collect()
    };
    for form in Form::ALL {
        for poem in poems(Some(form), "", "") {
            assert_eq!(regular_form(&poem), Some(form), "{poem}");
            assert!(is_well_formed(&poem), "{poem}");
        }
    }
    let line_starts = |poem: &str| -> String {
        poem.split(['，', '。', '？', '！', '；'])
            .filter_map(|line| line.chars().next())
            .collect()
    };
    for poem in poems(Some(Form::Qijue), "春夏秋冬", "") {
        assert_eq!(regular_form(&poem), Some(Form::Qijue), "{poem}");
        assert_eq!(line_starts(&poem), "春夏秋冬", "{poem}");
    }
    for poem in poems(Some(Form::Wulv), "山水", "山") {
        assert_eq!(regular_form(&poem), Some(Form::Wulv), "{poem}");
        assert!(line_starts(&poem).starts_with("山水"), "{poem}");
    }
    for (acrostic, form) in [("春夏秋", Form::Qijue), ("春夏秋冬山水白日", Form::Qilv)] {
        for poem in poems(None, acrostic, "") {
            assert_eq!(regular_form(&poem), Some(form), "without --form: {poem}");
            assert!(line_starts(&poem).starts_with(acrostic), "{poem}");
        }
    }
}

#[test]
fn forms_refuse_what_they_cannot_write() {
    let tokenizer = common::tiny_tokenizer();
    let err = PoemConstraint::new(&tokenizer, Some(Form::Wujue), "春夏秋冬山")
        .err()
        .unwrap();
    assert!(
        matches!(err, SampleError::AcrosticTooLong { lines: 4, .. }),
        "{err}"
    );
    let err = PoemConstraint::new(&tokenizer, None, "春夏秋冬山水白日依")
        .err()
        .unwrap();
    assert!(
        matches!(err, SampleError::AcrosticTooLong { lines: 8, .. }),
        "{err}"
    );
    let err = PoemConstraint::new(&tokenizer, None, "春，").err().unwrap();
    assert!(matches!(err, SampleError::AcrosticMark('，')), "{err}");
    let err = PoemConstraint::new(&tokenizer, None, "春x").err().unwrap();
    assert!(err.to_string().contains("x"), "{err}");

    let wujue = (Some(Form::Wujue), "", false);
    let err = refusal(&tokenizer, "白日依山尽。", wujue, 120).unwrap_err();
    assert!(err.contains("character 6") && err.contains("，"), "{err}");
    let err = refusal(&tokenizer, "白日依山，", wujue, 120).unwrap_err();
    assert!(err.contains("character 5"), "{err}");
    let err = refusal(&tokenizer, "白日", wujue, 10).unwrap_err();
    assert!(err.contains("raise it to 23"), "{err}");
    assert!(refusal(&tokenizer, "白日依山尽，", wujue, 19).is_ok());
    let acrostic = (Some(Form::Wujue), "春夏", false);
    let err = refusal(&tokenizer, "白日", acrostic, 120).unwrap_err();
    assert!(err.contains("`春`"), "{err}");
}

#[test]
fn a_missing_or_mismatched_run_is_refused_with_what_to_do() {
    let err = load_run(Path::new("/nonexistent/run"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cargo run --release --bin train"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    tiny_run(tmp.path());
    let other = shige::data::CharTokenizer::from_text("白日依山尽，黄河入海流。\n").unwrap();
    std::fs::write(tmp.path().join(TOKENIZER_FILE), other.to_json().unwrap()).unwrap();
    let err = load_run(tmp.path()).err().unwrap().to_string();
    assert!(err.contains("different runs"), "{err}");
}

#[test]
fn well_formed_verse_is_recognised() {
    assert!(is_well_formed(
        "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
    ));
    assert!(
        !is_well_formed("白日依山尽，黄河入海流。欲穷千里目，更上一层。"),
        "unequal lines"
    );
    assert!(
        !is_well_formed("白日依山尽。黄河入海流，欲穷千里目，更上一层楼。"),
        "punctuation out of turn"
    );
    assert!(!is_well_formed("白日依山尽，黄河入海流。"), "two lines");
}

#[test]
fn the_meter_gives_only_poems_that_keep_tones_and_rhyme() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let newline = run.tokenizer.id(NEWLINE).unwrap();
    let tables = Tables::shipped();
    for (form, acrostic) in [
        (Some(Form::Wujue), ""),
        (Some(Form::Qijue), ""),
        (Some(Form::Wulv), ""),
        (Some(Form::Qilv), ""),
        (None, "春山"),
    ] {
        let constraint = PoemConstraint::new(&run.tokenizer, form, acrostic)
            .unwrap()
            .with_meter(tables)
            .unwrap();
        let gen = Generation {
            constraint: Some(&constraint),
            ..Generation::new(120, Sampling::with_temperature(1.0), Some(newline))
        };
        for seed in 0..8 {
            let ids = generate(&run.model, &[newline], &gen, &mut rng(seed), &mut |_| {}).unwrap();
            let poem = run.tokenizer.decode(&ids).unwrap().trim_end().to_string();
            let score = score_poem(&poem, tables);
            assert!(
                score.fits_template(),
                "{form:?} {acrostic}: {poem} {score:?}"
            );
            assert_eq!(score.tones_unknown, 0, "{poem}");
            assert!(score.rhymes, "{form:?} {acrostic}: {poem} {score:?}");
            // No 重韵: the even lines end on distinct characters.
            let finals: Vec<char> = poem
                .split(['，', '。'])
                .skip(1)
                .step_by(2)
                .filter_map(|line| line.chars().last())
                .collect();
            let distinct: std::collections::HashSet<&char> = finals.iter().collect();
            assert_eq!(distinct.len(), finals.len(), "{poem}");
            if let Some(first) = acrostic.chars().next() {
                assert!(poem.starts_with(first), "{poem}");
            }
        }
    }
}

#[test]
fn the_meter_refuses_what_breaks_it() {
    let full = shige::data::CharTokenizer::from_text(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/poems.txt")).unwrap(),
    )
    .unwrap();
    let metered = (Some(Form::Wujue), "", true);
    // 登鹳雀楼 keeps the meter from its first character to its last.
    let poem = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";
    refusal(&full, poem, metered, 120).unwrap();
    // After 白日依山尽 only 仄起首句不入韵 is left: its second line's second character is 平.
    let err = refusal(&full, "白日依山尽，黄日", metered, 120).unwrap_err();
    assert!(
        err.contains("character 8 is '日'")
            && err.contains("平 (level-tone)")
            && err.contains("meter"),
        "{err}"
    );
    // The fourth line must rhyme with the second (流, 尤): 山 (删) does not.
    let prompt = "白日依山尽，黄河入海流。欲穷千里目，更上一层山";
    let err = refusal(&full, prompt, metered, 120).unwrap_err();
    assert!(
        err.contains("character 23 is '山'") && err.contains("rhymes"),
        "{err}"
    );
    // Nor may it rhyme on 流 again (重韵).
    let prompt = "白日依山尽，黄河入海流。欲穷千里目，更上一层流";
    let err = refusal(&full, prompt, metered, 120).unwrap_err();
    assert!(
        err.contains("character 23 is '流'") && err.contains("ends no earlier line"),
        "{err}"
    );
    // Without a form there is no template to keep.
    let err = PoemConstraint::new(&full, None, "")
        .unwrap()
        .with_meter(Tables::shipped())
        .err()
        .unwrap();
    assert!(err.to_string().contains("--meter needs a form"), "{err}");
}

#[test]
fn a_meter_with_nothing_left_says_so_instead_of_breaking_it() {
    // A vocabulary of two 仄 characters: a 五绝's meter soon needs a 平 one.
    let tokenizer = shige::data::CharTokenizer::from_text("日月，。\n").unwrap();
    let newline = tokenizer.id(NEWLINE).unwrap();
    let metered = PoemConstraint::new(&tokenizer, Some(Form::Wujue), "")
        .unwrap()
        .with_meter(Tables::shipped())
        .unwrap();
    let mut context = vec![newline];
    let mut logits = vec![0f32; tokenizer.vocab_size()];
    // 仄仄仄 still fits 仄起首句入韵 (仄仄仄平平); its fourth character must be 平.
    for _ in 0..3 {
        metered.mask(&context, &mut logits).unwrap();
        context.push(tokenizer.id('日').unwrap());
        logits.fill(0.0);
    }
    let err = metered.mask(&context, &mut logits).unwrap_err().to_string();
    assert!(
        err.contains("no character") && err.contains("character 4"),
        "{err}"
    );
}

#[test]
fn a_cancelled_generation_stops_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let newline = run.tokenizer.id(NEWLINE).unwrap();
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let gen = Generation {
        cancel: Some(&cancel),
        ..Generation::new(100, Sampling::with_temperature(1.0), None)
    };
    // Cancelled after the third token (as the page's server does when its client goes away).
    let mut seen = 0;
    let mut on_token = |_| {
        seen += 1;
        if seen == 3 {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let ids = generate(&run.model, &[newline], &gen, &mut rng(1), &mut on_token).unwrap();
    assert_eq!(ids.len(), 3);
}

#[test]
fn a_texts_likelihood_is_the_mean_of_its_tokens_log_probabilities() {
    let (model, _) = Gpt::seeded(
        &common::small_config(40, 2, Position::Rope),
        3,
        &Device::Cpu,
    )
    .unwrap();
    let ids: Vec<u32> = (0..12).map(|i| (i * 7 % 40) as u32).collect();
    let logits = common::full_logits(&model, &ids[..11]); // (T, V)
    let expected = logits
        .iter()
        .zip(&ids[1..])
        .map(|(row, &next)| neg_log_softmax(row, next))
        .sum::<f64>()
        / 11.0;
    let nll = shige::sample::mean_nll(&model, &ids).unwrap();
    assert!(
        (nll - expected).abs() < 1e-5 * expected,
        "{nll} against {expected}"
    );
    assert!(shige::sample::mean_nll(&model, &ids[..1]).is_err());
}

/// −log softmax(row)[next], in f64.
fn neg_log_softmax(row: &[f32], next: u32) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64));
    let total: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + total.ln() - row[next as usize] as f64
}

#[test]
fn past_a_learned_table_each_token_is_scored_in_the_context_generation_gives_it() {
    // block_size 16: generation crops its context to the last 8 tokens whenever it would
    // outgrow 16, so the 39 targets of a 40-token text are predicted from contexts that start
    // at token 0 (targets 1–16), 9 (17–25), 18 (26–34) and 27 (35–39).
    let (model, _) = Gpt::seeded(
        &common::small_config(40, 2, Position::Learned),
        4,
        &Device::Cpu,
    )
    .unwrap();
    let ids: Vec<u32> = (0..40).map(|i| (i * 11 % 40) as u32).collect();
    let start = |target: usize| match target {
        1..=16 => 0,
        17..=25 => 9,
        26..=34 => 18,
        _ => 27,
    };
    let expected = (1..40)
        .map(|t| {
            let logits = common::full_logits(&model, &ids[start(t)..t]); // (T, V)
            neg_log_softmax(logits.last().unwrap(), ids[t])
        })
        .sum::<f64>()
        / 39.0;
    let nll = shige::sample::mean_nll(&model, &ids).unwrap();
    assert!(
        (nll - expected).abs() < 1e-5 * expected,
        "{nll} against {expected}"
    );
}

#[test]
fn truncation_ranks_by_logits_at_any_temperature() {
    // At a temperature of 1e30 every weight e^(l/T) rounds to 1: the order must come from the
    // logits, which temperature cannot change.
    let logits = [0.1f32, 2.0, -1.0, 1.5, 2.0 - 1e-6];
    let mut r = rng(3);
    for temperature in [1.0, 1e6, 1e30] {
        let top = |k| Sampling {
            top_k: Some(k),
            ..Sampling::with_temperature(temperature)
        };
        for _ in 0..50 {
            assert_eq!(top(1).draw(&logits, &mut r), 1, "top-k 1 at {temperature}");
        }
        let drawn: std::collections::BTreeSet<u32> =
            (0..300).map(|_| top(2).draw(&logits, &mut r)).collect();
        assert!(
            drawn.iter().all(|&i| i == 1 || i == 4),
            "{drawn:?} at {temperature}"
        );
        let nucleus = Sampling {
            top_p: Some(1e-6),
            ..Sampling::with_temperature(temperature)
        };
        assert_eq!(nucleus.draw(&logits, &mut r), 1, "top-p at {temperature}");
    }
    // At 1e30 the two kept tokens are equally likely.
    let drawn: Vec<u32> = (0..2000)
        .map(|_| {
            Sampling {
                top_k: Some(2),
                ..Sampling::with_temperature(1e30)
            }
            .draw(&logits, &mut r)
        })
        .collect();
    let ones = drawn.iter().filter(|&&i| i == 1).count();
    assert!((850..1150).contains(&ones), "{ones} of 2000");
}

#[test]
fn every_scheme_crops_its_context_at_the_block() {
    // block_size 16: past it the context jumps to its last 8 tokens, for every scheme, so that
    // each new token costs the same however long the text grows.
    for position in Position::ALL {
        let (model, _) =
            Gpt::seeded(&common::small_config(40, 2, position), 5, &Device::Cpu).unwrap();
        let starts: Vec<usize> = [16, 17, 25, 26, 100]
            .iter()
            .map(|&len| shige::sample::context_start(&model, len))
            .collect();
        assert_eq!(starts, [0, 9, 9, 18, 90], "{position}");
    }
}
