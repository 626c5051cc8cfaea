//! Poems asked for by their header (`sample --poet 李白 --title 秋夜`): the model finishes the
//! fields left to it, the poem after the header keeps its form and meter, and what cannot be
//! asked is refused in one line.

mod common;

use rand::SeedableRng;
use shige::config::{CorpusKind, DataConfig};
use shige::data::header::{split_header, HeaderRequest, Poets, SEPARATOR};
use shige::data::poem::{regular_form, Form};
use shige::data::{CharTokenizer, Corpus};
use shige::sample::{
    header_request, is_well_formed, poem_start, writes_ci, Generation, Generator, Opening, Sampling,
};
use shige::verse::{score_poem, Tables};
use std::path::PathBuf;

/// The first `n` titled poems of the shipped corpus.
fn titled(n: usize) -> String {
    common::root_file("data/titled.txt")
        .lines()
        .take(n)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// What a run trained on verse records of its corpus: the header's fields its lines begin with
/// (`None` for a run saved before they were recorded).
fn verse(header_fields: Option<usize>) -> DataConfig {
    DataConfig {
        kind: CorpusKind::Verse,
        header_fields,
        ..DataConfig::default()
    }
}

fn ask(poet: Option<&str>, title: Option<&str>) -> HeaderRequest {
    HeaderRequest {
        poet: poet.map(String::from),
        title: title.map(String::from),
    }
}

/// The text written for `header` and `rules` with seed `seed` (temperature 1: an untrained model
/// draws anything the rules allow), its header included.
fn write(
    generator: &mut Generator,
    tokenizer: &CharTokenizer,
    header: &HeaderRequest,
    rules: (Option<Form>, &str, bool),
    seed: u64,
) -> String {
    let opening = Opening::Header(header.clone());
    let start = poem_start(tokenizer, &opening, "", rules, 200).unwrap();
    let gen = Generation::new(200, Sampling::with_temperature(1.0), Some(start.opening[0]));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let written = generator
        .write(&start, &gen, &mut rng, &mut |_| {})
        .unwrap();
    let text = start.opening_text(tokenizer).unwrap() + &tokenizer.decode(&written).unwrap();
    text.trim_end_matches('\n').to_string()
}

#[test]
fn the_model_writes_the_fields_left_to_it_and_the_poem_after_the_header_keeps_form_and_meter() {
    let tokenizer = CharTokenizer::from_text(&titled(3000)).unwrap();
    let model = common::random_model(&tokenizer, 5);
    let mut generator = Generator::new(&model);
    let asked = [
        (Some("李白"), Some("秋夜")),
        (Some("李白"), None),
        (None, Some("秋夜")),
        (None, None),
    ];
    for (poet, title) in asked {
        for (form, meter) in [(Form::Wujue, false), (Form::Qilv, true)] {
            for seed in 0..3 {
                let text = write(
                    &mut generator,
                    &tokenizer,
                    &ask(poet, title),
                    (Some(form), "", meter),
                    seed,
                );
                let (header, poem) =
                    split_header(&text).unwrap_or_else(|| panic!("{text}: a header"));
                let (written_poet, written_title) = header
                    .split_once(SEPARATOR)
                    .unwrap_or_else(|| panic!("{text}: poet · title"));
                for (given, written) in [(poet, written_poet), (title, written_title)] {
                    match given {
                        Some(given) => assert_eq!(written, given, "{text}"),
                        None => assert!(
                            (1..=24).contains(&written.chars().count())
                                && !written.contains(['【', '·', '\n']),
                            "{text}: a field of 1 to 24 characters without the header's marks"
                        ),
                    }
                }
                assert_eq!(regular_form(poem), Some(form), "{text}");
                assert!(
                    is_well_formed(&text),
                    "{text}: well-formed, its header aside"
                );
                let score = score_poem(&text, Tables::shipped());
                if meter {
                    assert!(
                        score.fits_template() && score.rhymes && !score.repeated_rhyme,
                        "{text}: {score:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_header_given_whole_is_read_as_a_prompt_is() {
    let tokenizer = CharTokenizer::from_text(&titled(500)).unwrap();
    let model = common::random_model(&tokenizer, 5);
    let mut generator = Generator::new(&model);
    let header = ask(Some("李白"), Some("秋夜"));
    let start = poem_start(
        &tokenizer,
        &Opening::Header(header.clone()),
        "白",
        (Some(Form::Wujue), "", false),
        200,
    )
    .unwrap();
    assert_eq!(start.header_end, None, "nothing left to the model");
    assert_eq!(start.opening_text(&tokenizer).unwrap(), "【李白·秋夜】");
    let gen = Generation {
        constraint: start.constraint.as_ref(),
        ..Generation::new(200, Sampling::with_temperature(1.0), Some(start.opening[0]))
    };
    let rng = || rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let written = generator
        .write(&start, &gen, &mut rng(), &mut |_| {})
        .unwrap();
    let generated = generator
        .generate(&start.ids(), &gen, &mut rng(), &mut |_| {})
        .unwrap();
    assert_eq!(written, [&start.prompt[..], &generated].concat());
}

#[test]
fn what_cannot_be_asked_is_refused_in_one_line() {
    let untitled = CharTokenizer::from_text(&common::root_file("data/poems.txt")).unwrap();
    let wujue = (Some(Form::Wujue), "", false);
    let refusal = |tokenizer: &CharTokenizer, header: HeaderRequest| {
        poem_start(tokenizer, &Opening::Header(header), "", wujue, 200)
            .err()
            .unwrap()
            .to_string()
    };
    let err = refusal(&untitled, ask(Some("李白"), None));
    assert!(
        err.contains("trained without headers") && err.contains("configs/titled.toml"),
        "{err}"
    );

    let tokenizer = CharTokenizer::from_text(&titled(3000)).unwrap();
    for (header, says) in [
        (ask(None, Some("秋\n夜")), "line break"),
        (ask(None, Some("秋夜】")), "marks the header"),
        (ask(Some(""), None), "is empty"),
    ] {
        let err = refusal(&tokenizer, header);
        assert!(err.contains(says) && !err.contains('\n'), "{err}");
    }
    let err = refusal(&tokenizer, ask(Some("李白"), Some("𠀀夜")));
    assert!(
        err.contains("cannot write the header 【李白·𠀀夜】") && err.contains("𠀀"),
        "{err}"
    );
    let poets = Poets::of_corpus(&titled(3000));
    let asked = (Some("李太白".to_string()), None);
    let err = header_request(&tokenizer, &verse(None), asked, Some(&poets))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no poet 李太白") && err.contains("李白"),
        "{err}"
    );
    let plain = header_request(&untitled, &verse(None), (None, None), None).unwrap();
    assert_eq!(plain, Opening::Plain, "a run without headers writes none");
    let own = header_request(&tokenizer, &verse(None), (None, None), None).unwrap();
    assert_eq!(
        own,
        Opening::Header(ask(None, None)),
        "a titled run writes its own header"
    );
    assert!(
        !writes_ci(&tokenizer, &verse(None)),
        "a titled run writes no ci by tune"
    );
    let ci = CharTokenizer::from_text("【浣溪沙】一曲新词酒一杯。\n").unwrap();
    let lines = DataConfig {
        kind: CorpusKind::Lines,
        ..DataConfig::default()
    };
    assert!(writes_ci(&ci, &lines) && !writes_ci(&untitled, &verse(None)));
}

#[test]
fn a_titled_corpus_is_verse_and_a_titled_poem_scores_as_its_poem() {
    let text = titled(40);
    let corpus = Corpus::parse(&text, &PathBuf::from("titled.txt"), CorpusKind::Auto).unwrap();
    assert_eq!(corpus.kind, CorpusKind::Verse);
    assert_eq!(
        corpus.items.len(),
        40,
        "every titled poem kept, its header with it"
    );
    let line = text.lines().nth(5).unwrap();
    let (_, poem) = split_header(line).unwrap();
    let (with, without) = (
        score_poem(line, Tables::shipped()),
        score_poem(poem, Tables::shipped()),
    );
    assert!(with.form.is_some());
    assert_eq!(format!("{with:?}"), format!("{without:?}"));
}

/// What a run writes before its poems is the header of the corpus it was trained on, recorded
/// when it was trained, not read from its vocabulary: a child of a titled run fine-tuned on plain
/// poems writes none, one fine-tuned on ci writes ci by tune.
#[test]
fn a_run_writes_the_headers_of_the_corpus_it_was_trained_on_not_of_its_vocabulary() {
    use shige::config::Override;
    use shige::sample::{ci_start, has_headers};
    use shige::train::load::load_run;
    use shige::train::parent::Parent;
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let lines = |file: &str, n: usize| -> String {
        let text = common::root_file(file);
        text.lines().take(n).map(|l| format!("{l}\n")).collect()
    };
    let mut cfg = common::tiny_config();
    (cfg.data.corpus, cfg.train.max_iters) = (write("titled.txt", titled(400)), 20);
    let parent_dir = tmp.path().join("titled");
    common::run(&cfg, &parent_dir, false, None).unwrap();
    let titled_run = load_run(&parent_dir).unwrap();
    assert_eq!(titled_run.config.data.header_fields, Some(2));
    assert!(has_headers(&titled_run.tokenizer, &titled_run.config.data));

    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
    let children = [
        ("plain", write("plain.txt", lines("data/poems.txt", 300)), 0),
        ("ci", write("ci.txt", lines("data/ci.txt", 300)), 1),
    ];
    for (name, corpus, fields) in children {
        let parent = Parent::open(&parent_dir).unwrap();
        let set = [
            Override::parse(&format!("data.corpus=\"{corpus}\"")).unwrap(),
            Override::parse("train.max_iters=20").unwrap(),
        ];
        let config = parent.config_for(&tiny, &set).unwrap();
        let dir = tmp.path().join(name);
        common::fine_tune(config, &dir, parent).unwrap();
        let run = load_run(&dir).unwrap();
        let data = &run.config.data;
        assert_eq!(data.header_fields, Some(fields), "{name}");
        assert!(
            run.tokenizer.id('·').is_some(),
            "{name}: the parent's vocabulary, header marks included"
        );
        assert!(
            !has_headers(&run.tokenizer, data),
            "{name} writes no 【poet·title】"
        );
        let header = header_request(&run.tokenizer, data, (None, None), None).unwrap();
        let expected = [Opening::Plain, Opening::Own][fields].clone();
        assert_eq!(header, expected, "{name}: no 【poet·title】");
        assert_eq!(writes_ci(&run.tokenizer, data), fields == 1, "{name}");
        let tune = ci_start((&run.tokenizer, data), ("浣溪沙", "", false), "", 200);
        assert_eq!(tune.is_ok(), fields == 1, "{name}: --tune");
        // Its poems (a plain one, or a ci after its tune's header) hold no header mark, though
        // its vocabulary has them and its weights learned them from the parent.
        let start = match tune {
            Ok(start) => start,
            Err(_) => poem_start(&run.tokenizer, &header, "", (None, "", false), 100).unwrap(),
        };
        let mut generator = Generator::new(&run.model);
        for seed in 0..30 {
            let gen = Generation::new(100, Sampling::with_temperature(1.0), Some(start.opening[0]));
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let ids = generator
                .write(&start, &gen, &mut rng, &mut |_| {})
                .unwrap();
            let text = run.tokenizer.decode(&ids).unwrap();
            assert!(
                !text.contains(['【', '·', '】']),
                "{name}, seed {seed}: {text}"
            );
        }
    }
    // Runs saved before the fields were recorded are read from their vocabulary.
    let ci = CharTokenizer::from_text("【浣溪沙】一曲新词酒一杯。\n").unwrap();
    assert!(writes_ci(&ci, &verse(None)) && !writes_ci(&ci, &verse(Some(0))));
    let corpus =
        |text: &str| Corpus::parse(text, &PathBuf::from("c.txt"), CorpusKind::Auto).unwrap();
    assert_eq!(corpus(&titled(40)).header_fields(), 2);
    assert_eq!(corpus(&lines("data/ci.txt", 40)).header_fields(), 1);
    assert_eq!(corpus(&lines("data/poems.txt", 40)).header_fields(), 0);
}

/// A header inside the prompt of a titled run is refused (the program writes the header; a second
/// one would break the form unseen), and so are header marks in an acrostic, on any run; an
/// invisible character in a poet's name is shown by its code point.
#[test]
fn header_marks_stay_out_of_prompts_and_acrostics_and_invisible_names_are_shown() {
    let tokenizer = CharTokenizer::from_text(&titled(3000)).unwrap();
    let wujue = (Some(Form::Wujue), "", false);
    let header = ask(Some("李白"), None);
    for prompt in ["【李白·秋夜】白日", "白日】", "白·日"] {
        let err = poem_start(
            &tokenizer,
            &Opening::Header(header.clone()),
            prompt,
            wujue,
            200,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("marks a header") && err.contains("--poet"),
            "{prompt}: {err}"
        );
    }
    let untitled = CharTokenizer::from_text(&common::root_file("data/tiny.txt")).unwrap();
    for (tokenizer, acrostic) in [
        (&tokenizer, "【·】"),
        (&tokenizer, "春】"),
        (&untitled, "春·"),
    ] {
        let err = poem_start(
            tokenizer,
            &Opening::Plain,
            "",
            (Some(Form::Wujue), acrostic, false),
            200,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("--acrostic may hold only"),
            "{acrostic}: {err}"
        );
    }
    let poets = Poets::of_corpus(&titled(3000));
    let err = poets.check("\u{200b}").unwrap_err();
    assert!(err.contains("no poet <U+200B> among"), "{err}");
    let err = ask(Some("李\u{202e}白"), Some("\n")).check().unwrap_err();
    assert!(
        err.contains("<U+202E>") || err.contains("<U+000A>"),
        "{err}"
    );
}
