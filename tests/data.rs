//! The corpus, the tokenizer, the split and the batches.

mod common;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use shige::config::CorpusKind;
use shige::data::corpus::VAL_EVERY;
use shige::data::poem::{regular_form, Form};
use shige::data::{CharTokenizer, Corpus, DataError, RunText, Split, Splits};
use std::collections::HashSet;
use std::path::Path;

#[test]
fn tokenizer_round_trips_the_tiny_corpus_one_token_per_character() {
    let corpus = common::tiny_corpus();
    let text = corpus.text();
    let tokenizer = CharTokenizer::from_text(&text).unwrap();
    let ids = tokenizer.encode(&text).unwrap();
    assert_eq!(ids.len(), text.chars().count());
    assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    assert_eq!(tokenizer.id('\n'), Some(0), "newline is a token");
    let distinct: HashSet<char> = text.chars().collect();
    assert_eq!(tokenizer.vocab_size(), distinct.len());
}

#[test]
fn saved_tokenizer_json_reloads_to_the_same_ids() {
    let tokenizer = common::tiny_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, tokenizer.to_json().unwrap()).unwrap();
    let reloaded = CharTokenizer::load(&path).unwrap();
    let text = common::tiny_corpus().text();
    assert_eq!(
        reloaded.encode(&text).unwrap(),
        tokenizer.encode(&text).unwrap()
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        json["model"]["type"], "WordLevel",
        "a standard tokenizer.json"
    );
}

#[test]
fn unknown_characters_are_named_not_dropped() {
    let tokenizer = common::tiny_tokenizer();
    let err = tokenizer.encode("白日abc😀a").unwrap_err().to_string();
    for needle in ["'a'", "'b'", "'c'", "'😀'", "vocabulary"] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }
    assert_eq!(
        err.matches("'a'").count(),
        1,
        "each unknown character once: {err}"
    );
}

#[test]
fn split_keeps_whole_poems_on_one_side() {
    let corpus = common::tiny_corpus();
    let (train, val) = corpus.split();
    assert_eq!(train.len() + val.len(), corpus.items.len());
    assert_eq!(val.len(), corpus.items.len() / VAL_EVERY);
    let train_set: HashSet<&String> = train.into_iter().collect();
    assert!(
        val.iter().all(|p| !train_set.contains(p)),
        "a poem on both sides"
    );
}

#[test]
fn one_seed_gives_the_same_batches() {
    let corpus = common::tiny_corpus();
    let tokenizer = common::tiny_tokenizer();
    let splits = Splits::new(&RunText::from(corpus.clone()), &tokenizer, 16).unwrap();
    let draw = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (x, y) = splits
            .batch(Split::Train, 4, 16, &mut rng, &Device::Cpu)
            .unwrap();
        (x.to_vec2::<u32>().unwrap(), y.to_vec2::<u32>().unwrap())
    };
    let (a, b, c) = (draw(1), draw(1), draw(2));
    assert_eq!(a, b);
    assert_ne!(a, c);
    let (x, y) = a;
    assert_eq!((x.len(), x[0].len()), (4, 16));
    for (xr, yr) in x.iter().zip(&y) {
        assert_eq!(xr[1..], yr[..15], "y is x shifted by one");
    }
}

fn load_err(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.txt");
    std::fs::write(&path, bytes).unwrap();
    Corpus::load(&path, CorpusKind::Verse)
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_corpora_get_clear_errors() {
    assert!(load_err(b"").contains("is empty"));
    assert!(load_err(b"\n\n  \n").contains("is empty"));
    assert!(load_err("hello world\n白日依山尽\n".as_bytes()).contains("no valid poem"));
    assert!(load_err(&[0xe7, 0x99, 0xbd, 0xff, 0xfe, 0x00]).contains("not UTF-8"));
    let missing = Corpus::load(Path::new("/nonexistent/poems.txt"), CorpusKind::Auto)
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cannot read corpus"), "{missing}");
}

#[test]
fn a_block_longer_than_the_val_split_is_an_error() {
    let corpus = Corpus::parse(
        &"白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n".repeat(20),
        Path::new("x"),
        CorpusKind::Auto,
    )
    .unwrap();
    let tokenizer = CharTokenizer::from_text(&corpus.text()).unwrap();
    let err = Splits::new(&RunText::from(corpus.clone()), &tokenizer, 64)
        .err()
        .expect("too short");
    assert!(
        matches!(err, DataError::TooShort { split: "val", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("--block-size"), "{err}");
    assert!(Splits::new(&RunText::from(corpus.clone()), &tokenizer, 20).is_ok());
    // A validation file too small to hold anything out is named, with what it needs.
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.txt");
    std::fs::write(
        &small,
        "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n".repeat(19),
    )
    .unwrap();
    let others = shige::data::run_text::OtherFiles {
        validation: small.to_str(),
        decay: None,
    };
    let corpus = Corpus::parse(
        &"青山横北郭，白水绕东城。此地一为别，孤蓬万里征。\n".repeat(20),
        Path::new("x"),
        CorpusKind::Auto,
    )
    .unwrap();
    let run_text = RunText::new(corpus, others).unwrap();
    let tokenizer = CharTokenizer::from_text(&run_text.vocabulary_text()).unwrap();
    let err = Splits::new(&run_text, &tokenizer, 20)
        .err()
        .expect("nothing held out")
        .to_string();
    assert!(
        err.contains("the val split has 0 tokens")
            && err.contains(&format!("the held-out text of {}", small.display()))
            && err.contains("give at least 20"),
        "{err}"
    );
}

#[test]
fn irregular_lines_are_counted_not_kept() {
    let text = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n白日依山尽，黄河入海。\nabc\n";
    let corpus = Corpus::parse(text, Path::new("x"), CorpusKind::Verse).unwrap();
    assert_eq!((corpus.items.len(), corpus.skipped), (1, 2));
}

#[test]
fn a_byte_order_mark_does_not_cost_the_first_poem() {
    let text = "\u{feff}白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n床前明月光，疑是地上霜。举头望明月，低头思故乡。\n";
    let corpus = Corpus::parse(text, Path::new("bom.txt"), CorpusKind::Auto).unwrap();
    assert_eq!(corpus.items.len(), 2);
    assert_eq!(corpus.skipped, 0);
    assert!(corpus.items[0].starts_with('白'));
}

#[test]
fn windows_of_a_split_predict_every_token_once() {
    let corpus = common::tiny_corpus();
    let tokenizer = common::tiny_tokenizer();
    let splits = Splits::new(&RunText::from(corpus.clone()), &tokenizer, 32).unwrap();
    let val = splits.tokens(Split::Val);
    let batches = splits.windows(Split::Val, 5, 32, &Device::Cpu).unwrap();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (x, y) in &batches {
        assert!(x.dim(0).unwrap() <= 5 && x.dims() == y.dims());
        xs.extend(x.flatten_all().unwrap().to_vec1::<u32>().unwrap());
        ys.extend(y.flatten_all().unwrap().to_vec1::<u32>().unwrap());
    }
    // The inputs are the split but its last token, the targets the split but its first.
    assert_eq!(xs, val[..val.len() - 1]);
    assert_eq!(ys, val[1..]);
    assert!(
        !(val.len() - 1).is_multiple_of(32),
        "the tiny split ends in a shorter window"
    );
}

#[test]
fn a_line_collection_keeps_every_line_and_holds_out_every_twentieth() {
    // Song ci and couplets: not regular verse, one item per line, no blank line between them.
    let lines: Vec<String> = (0..40)
        .map(|i| format!("明月几时有，把酒问青天{i}。"))
        .collect();
    let corpus = Corpus::parse(&lines.join("\r\n"), Path::new("ci.txt"), CorpusKind::Auto).unwrap();
    assert_eq!(corpus.kind, CorpusKind::Lines, "{}", corpus.why);
    assert_eq!(corpus.items, lines);
    let (train, val) = corpus.split_text();
    assert_eq!(val, format!("{}\n{}\n", lines[19], lines[39]));
    assert_eq!(train.lines().count(), 38);
}

#[test]
fn running_text_too_short_for_a_block_says_so() {
    let corpus = Corpus::parse(
        "To be, or not to be.",
        Path::new("one.txt"),
        CorpusKind::Auto,
    )
    .unwrap();
    assert_eq!(corpus.kind, CorpusKind::Text);
    let tokenizer = CharTokenizer::from_text(&corpus.text()).unwrap();
    let err = Splits::new(&RunText::from(corpus.clone()), &tokenizer, 8)
        .err()
        .expect("too short");
    assert!(err.to_string().contains("--block-size"), "{err}");
    assert!(Splits::new(&RunText::from(corpus.clone()), &tokenizer, 1).is_ok());
}

#[test]
fn a_kind_asked_for_is_kept_and_said() {
    let text = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n".repeat(3);
    let corpus = Corpus::parse(&text, Path::new("x"), CorpusKind::Text).unwrap();
    assert_eq!((corpus.kind, corpus.items.len()), (CorpusKind::Text, 1));
    assert_eq!(corpus.text(), text);
    assert!(RunText::from(corpus.clone())
        .describe("x")
        .contains("as the config asks"));
}

/// `prepare_data` reads every source before it writes a file; a source that gives nothing to
/// write (an empty JSON array, nothing usable in it) is refused, so data/ keeps what it had.
#[test]
fn prepare_refuses_every_source_that_gives_nothing_to_write() {
    use shige::data::poem::Form;
    use shige::prepare::ci::{build_ci, learn_tunes};
    use shige::prepare::poems::build_corpus;
    use shige::prepare::tone_tables::{rhyme_table, tone_counts};
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str, file: &str, json: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), json).unwrap();
        dir
    };
    let same = |t: &str| t.to_string();
    let message = |e: anyhow::Error| format!("{e:#}");

    let songci = dir("songci-empty", "ci.song.0.json", "[]");
    let err = message(build_ci(&songci, same).unwrap_err());
    assert!(
        err.contains("no usable ci") && err.contains("--songci"),
        "{err}"
    );
    let unusable = r#"[{"paragraphs": ["□□□。"], "rhythmic": "浣溪沙"}]"#;
    let songci = dir("songci-unusable", "ci.song.0.json", unusable);
    let err = message(build_ci(&songci, same).unwrap_err());
    assert!(err.contains("1 read: 1 unclean"), "{err}");
    assert!(message(learn_tunes(&[]).err().unwrap()).contains("no tune to learn"));

    let irregular = r#"[{"id": "a", "paragraphs": ["床前明月光。"]}]"#;
    let poems = dir("poems", "poet.tang.0.json", irregular);
    let err = message(build_corpus(&poems, &Form::ALL, same).unwrap_err());
    assert!(
        err.contains("no regular poem") && err.contains("--source"),
        "{err}"
    );
    let strains = dir("strains", "poet.tang.0.json", "[]");
    let err = message(tone_counts(&poems, &strains, same).unwrap_err());
    assert!(err.contains("--strains"), "{err}");
    let rhymes = tmp.path().join("rhymes.json");
    std::fs::write(&rhymes, r#"{"ping": {}}"#).unwrap();
    let err = message(rhyme_table(&rhymes, same).unwrap_err());
    assert!(err.contains("no character in a 平声 rhyme group"), "{err}");
}

/// data/titled.txt is data/poems.txt line by line, each poem after one header `【poet·title】`.
#[test]
fn the_titled_corpus_is_the_poems_after_their_headers() {
    let read = |name: &str| {
        std::fs::read_to_string(format!("{}/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let (titled, poems) = (read("titled.txt"), read("poems.txt"));
    assert_eq!(titled.lines().count(), poems.lines().count());
    for (line, poem) in titled.lines().zip(poems.lines()) {
        let (header, rest) = line.split_once('】').expect("a header");
        assert_eq!(rest, poem);
        let (poet, title) = header.strip_prefix('【').unwrap().split_once('·').unwrap();
        assert!(!poet.is_empty() && !title.is_empty(), "{line}");
        assert!(!title.contains(['【', '·']), "{line}");
    }
    assert!(titled.starts_with("【太宗皇帝·帝京篇十首 一】秦川雄帝宅"));
}

/// `prepare_data --poet` writes the plain and the headed corpus each under its own name, keeps
/// the forms asked, and never writes over a file that holds something else (a run trained on the
/// plain file resumes on it).
#[test]
fn one_poets_corpus_writes_over_nothing_and_keeps_the_forms_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().to_str().unwrap();
    let prepare = |extra: &[&str]| {
        common::binary(env!("CARGO_BIN_EXE_prepare_data"))
            .args(["--poet", "杜甫", "--out", out])
            .args(extra)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    };
    let read = |name: &str| std::fs::read_to_string(tmp.path().join(name)).unwrap();
    assert!(prepare(&[]).status.success());
    let plain = read("杜甫.txt");
    assert!(prepare(&["--headers"]).status.success());
    assert_eq!(read("杜甫.txt"), plain, "the plain corpus is kept");
    let headed = read("杜甫.titled.txt");
    assert!(headed.lines().all(|l| l.starts_with("【杜甫·")));
    assert!(
        prepare(&[]).status.success(),
        "the same file again: nothing changes"
    );
    // Only the forms asked.
    let wujue = tmp.path().join("wujue");
    let out = common::binary(env!("CARGO_BIN_EXE_prepare_data"))
        .args(["--poet", "杜甫", "--forms", "wujue,qijue", "--out"])
        .arg(&wujue)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(wujue.join("杜甫.txt")).unwrap();
    let forms: HashSet<&str> = text
        .lines()
        .map(|l| regular_form(l).unwrap().name())
        .collect();
    assert_eq!(
        forms,
        HashSet::from([Form::Wujue.name(), Form::Qijue.name()])
    );
    // A file that holds something else is refused, and kept.
    std::fs::write(tmp.path().join("杜甫.txt"), "mine\n").unwrap();
    let refused = prepare(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("exists and holds something else"),
        "{err}"
    );
    assert_eq!(read("杜甫.txt"), "mine\n");
}

/// `prepare_data --song` builds the larger corpus from the package's folder alone (none of the
/// rebuild's other sources), and says what it needs: the folder, and a build with OpenCC.
#[test]
fn the_larger_corpus_asks_for_the_package_and_opencc() {
    let prepare = |args: &[&str]| {
        let out = common::binary(env!("CARGO_BIN_EXE_prepare_data"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = prepare(&["--song"]);
    assert!(!ok && err.contains("--source"), "{err}");
    let (ok, err) = prepare(&["--song", "--source", "x", "--poet", "杜甫"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().to_str().unwrap();
    let (ok, err) = prepare(&["--song", "--source", "no/such/folder", "--out", out]);
    assert!(!ok, "{err}");
    match cfg!(feature = "prepare") {
        true => assert!(err.contains("no/such/folder"), "{err}"),
        false => assert!(err.contains("--features prepare"), "{err}"),
    }
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn the_share_of_unseen_characters_counts_characters_not_kinds() {
    use shige::data::unseen_share;
    assert_eq!(unseen_share("白日依山尽", "白日依山尽"), 0.0);
    // Two of the five characters unseen, spaces and line ends apart.
    assert!((unseen_share("白日 a\nb 山", "白日山") - 0.4).abs() < 1e-12);
    assert_eq!(unseen_share("", "x"), 0.0);
    assert_eq!(unseen_share("abc", ""), 1.0);
}
