//! Song ci by tune: the 词谱 learned from data/ci.txt, and `--tune`'s masking, checked by a
//! pattern reader written here apart from `verse::tunes`.

mod common;

use rand::SeedableRng;
use shige::data::CharTokenizer;
use shige::sample::{tune_start, Generation, Generator, SampleError, Sampling};
use shige::verse::ci_score::score_ci;
use shige::verse::tunes::{split_tune, TunePattern, Tunes, TUNE_LOST};

/// (length, mark) of each sentence of `text`, read character by character.
fn sentences(text: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut n = 0;
    for c in text.chars() {
        if "，、。".contains(c) {
            out.push((n, c));
            n = 0;
        } else {
            n += 1;
        }
    }
    assert_eq!(n, 0, "text after the last mark: {text}");
    out
}

/// The pattern column of data/cipu.tsv for `tune`, read as (length, mark) pairs.
fn shipped_pattern(cipu: &str, tune: &str) -> Vec<(usize, char)> {
    let line = cipu
        .lines()
        .find(|l| l.split('\t').next() == Some(tune))
        .unwrap_or_else(|| panic!("{tune} is in data/cipu.tsv"));
    let pattern = line.split('\t').nth(3).unwrap();
    let mut out = Vec::new();
    let mut digits = String::new();
    for c in pattern.chars() {
        match c.to_digit(10) {
            Some(_) => digits.push(c),
            None => {
                out.push((digits.parse().unwrap(), c));
                digits.clear();
            }
        }
    }
    out
}

#[test]
fn patterns_read_print_and_say_where_a_ci_differs() {
    let text = "一曲新词酒一杯。去年天气旧亭台。夕阳西下几时回。无可奈何花落去，似曾相识燕归来。小园香径独徘徊。";
    let pattern = TunePattern::of(text).unwrap();
    assert_eq!(pattern.to_string(), "7。7。7。7，7。7。");
    assert_eq!(pattern.len(), 48);
    assert_eq!(
        "7。7。7。7，7。7。".parse::<TunePattern>().unwrap(),
        pattern
    );
    assert_eq!(pattern.misfit(text), None);
    let other = "3、4，5。".parse::<TunePattern>().unwrap();
    assert_eq!(other.sentences, vec![(3, '、'), (4, '，'), (5, '。')]);
    assert_eq!(
        pattern.misfit("一曲新词酒一杯。去年天气旧亭。").unwrap(),
        "sentence 2 is 6 characters and 。 where the tune has 7 and 。"
    );
    assert!(pattern
        .misfit("一曲新词酒一杯。")
        .unwrap()
        .contains("1 sentences where the tune has 6"));
    for bad in ["", "一曲", "一曲，", "，一曲。", "一曲。。"] {
        assert!(TunePattern::of(bad).is_none(), "{bad:?}");
    }
    for bad in ["", "7", "7，", "0。", "7。x", "。"] {
        assert!(bad.parse::<TunePattern>().is_err(), "{bad:?}");
    }
    assert_eq!(split_tune("【浣溪沙】一曲。"), Some(("浣溪沙", "一曲。")));
    assert_eq!(split_tune("【】一曲。"), None);
    assert_eq!(split_tune("一曲。"), None);
}

#[test]
fn the_learned_cipu_takes_each_tunes_most_common_pattern() {
    let ci = [
        ("甲", "一二三。四五。"),
        ("甲", "一二三，四五。"),
        ("甲", "一二。三四五。"),
        ("甲", "一二三，四五。"),
        ("乙", "一。"),
        ("乙", "一二。"), // a tie: the first pattern met wins
        (TUNE_LOST, "一二三。"),
        ("乙", "not a ci"),
    ];
    let tunes = Tunes::learn(ci);
    let all: Vec<(&str, usize, usize, String)> = tunes
        .all()
        .iter()
        .map(|t| (t.name.as_str(), t.ci, t.fitting, t.pattern.to_string()))
        .collect();
    assert_eq!(
        all,
        vec![
            ("甲", 4, 2, "3，2。".to_string()),
            ("乙", 2, 1, "1。".to_string())
        ]
    );
    let again = Tunes::parse(&tunes.to_tsv()).unwrap();
    assert_eq!(again.to_tsv(), tunes.to_tsv(), "the table reads back");
    assert!(Tunes::parse("甲\t1\t1\n").is_err());
    assert!(Tunes::parse("甲\tx\t1\t1。\n").is_err());
}

/// The sentence lengths of four tunes as the books give them (钦定词谱's common forms: 浣溪沙
/// 42 characters, 鹧鸪天 55, 菩萨蛮 44, 西江月 50), written here by hand.
const BOOK_LENGTHS: [(&str, &[usize]); 4] = [
    ("浣溪沙", &[7, 7, 7, 7, 7, 7]),
    ("鹧鸪天", &[7, 7, 7, 7, 3, 3, 7, 7, 7]),
    ("菩萨蛮", &[7, 7, 5, 5, 5, 5, 5, 5]),
    ("西江月", &[6, 6, 7, 6, 6, 6, 7, 6]),
];

#[test]
fn the_shipped_cipu_has_the_books_sentence_lengths_for_common_tunes() {
    let shipped = Tunes::shipped();
    for (name, lengths) in BOOK_LENGTHS {
        let tune = shipped.get(name).unwrap();
        let learned: Vec<usize> = tune.pattern.sentences.iter().map(|&(n, _)| n).collect();
        assert_eq!(learned, lengths, "{name}");
        assert_eq!(
            tune.pattern.sentences.last().map(|s| s.1),
            Some('。'),
            "{name}"
        );
    }
    let top: Vec<&str> = shipped.all()[..3].iter().map(|t| t.name.as_str()).collect();
    assert_eq!(top, ["浣溪沙", "水调歌头", "鹧鸪天"]);
    assert!(shipped.get(TUNE_LOST).is_err(), "the lost tune is no tune");
}

#[test]
fn an_unknown_tune_is_refused_with_the_nearest_names() {
    let tunes = Tunes::shipped();
    let err = tunes.get("水调哥头").unwrap_err();
    assert!(
        err.contains("no tune 水调哥头") && err.contains("水调歌头"),
        "{err}"
    );
    assert_eq!(tunes.nearest("水调哥头", 1), ["水调歌头"]);
    assert!(
        tunes.nearest("忆江南", 5).contains(&"望江南・忆江南"),
        "an alias pair"
    );
    assert_eq!(
        tunes.nearest("浣西沙", 1),
        ["浣溪沙"],
        "a character mistyped"
    );
    assert_eq!(
        tunes.nearest("浣沙溪", 1),
        ["浣沙溪・浣溪沙"],
        "a name of an alias pair"
    );
    for empty in ["", " "] {
        let err = tunes.get(empty).unwrap_err();
        assert_eq!(err, "the tune's name is empty: give one, e.g. 水调歌头");
    }
}

/// Ci written out here, with whether each has its tune's pattern by [`BOOK_LENGTHS`]: the scorer
/// agrees with a reading that is not its own.
#[test]
fn the_scorer_judges_real_ci_as_the_books_do() {
    let cases = [
        // 晏殊, 浣溪沙: the book's form.
        ("【浣溪沙】一曲新词酒一杯。去年天气旧亭台。夕阳西下几时回。无可奈何花落去，似曾相识燕归来。小园香径独徘徊。", true),
        // 晏几道, 鹧鸪天: the book's form.
        ("【鹧鸪天】彩袖殷勤捧玉钟。当年拚却醉颜红。舞低杨柳楼心月，歌尽桃花扇底风。从别后，忆相逢。几回魂梦与君同。今宵剩把银釭照，犹恐相逢是梦中。", true),
        // The same without its two three-character sentences.
        ("【鹧鸪天】彩袖殷勤捧玉钟。当年拚却醉颜红。舞低杨柳楼心月，歌尽桃花扇底风。几回魂梦与君同。今宵剩把银釭照，犹恐相逢是梦中。", false),
        // 温庭筠, 菩萨蛮, with a line cut short.
        ("【菩萨蛮】小山重叠金明灭。鬓云欲度香腮雪。懒起画蛾眉。弄妆梳洗迟。照花前后镜。花面交相映。新帖绣罗襦。双双金鹧。", false),
    ];
    for (ci, fits) in cases {
        let (tune, text) = split_tune(ci).unwrap();
        let lengths: Vec<usize> = text
            .split(['，', '。'])
            .filter(|s| !s.is_empty())
            .map(|s| s.chars().count())
            .collect();
        let book = BOOK_LENGTHS
            .iter()
            .find(|(name, _)| *name == tune)
            .unwrap()
            .1;
        assert_eq!(lengths == book, fits, "the case itself: {ci}");
        assert_eq!(score_ci(ci, Tunes::shipped()).unwrap().fits, fits, "{ci}");
    }
}

#[test]
fn every_sample_of_the_20_most_common_tunes_has_the_tunes_pattern() {
    let text = common::root_file("data/ci.txt");
    let tokenizer = CharTokenizer::from_text(&text).unwrap();
    let model = common::random_model(&tokenizer, 3);
    let mut generator = Generator::new(&model);
    let cipu = common::root_file("data/cipu.tsv");
    let tunes = Tunes::shipped();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let common = tunes.all().iter().take(20);
    assert!(common.clone().all(|t| t.name != TUNE_LOST));
    for tune in common {
        for prompt in ["", "明月"] {
            let start = tune_start(&tokenizer, (tune, 1, None), prompt, 300).unwrap();
            let (ids, constraint) = (start.ids(), start.constraint.unwrap());
            let gen = Generation {
                constraint: Some(&constraint),
                ..Generation::new(300, Sampling::with_temperature(1.0), Some(ids[0]))
            };
            let new = generator
                .generate(&ids, &gen, &mut rng, &mut |_| {})
                .unwrap();
            assert_eq!(
                new.last(),
                Some(&ids[0]),
                "{}: the ci ends its line",
                tune.name
            );
            let ci = tokenizer
                .decode(&[&ids[1..], &new[..new.len() - 1]].concat())
                .unwrap();
            let body = ci
                .strip_prefix(&format!("【{}】{prompt}", tune.name))
                .unwrap_or_else(|| panic!("{ci} begins with its tune and the prompt"));
            let written = format!("{prompt}{body}");
            assert_eq!(
                sentences(&written),
                shipped_pattern(&cipu, &tune.name),
                "{ci}"
            );
        }
    }
}

#[test]
fn a_tune_the_vocabulary_cannot_write_and_a_prompt_that_breaks_the_pattern_are_refused() {
    let tunes = Tunes::shipped();
    let verse = CharTokenizer::from_text("白日依山尽，黄河入海流。\n").unwrap();
    let err = tune_start(&verse, (tunes.get("浣溪沙").unwrap(), 1, None), "", 300)
        .err()
        .unwrap();
    assert!(matches!(err, SampleError::TuneNotLearned(_)), "{err}");
    assert!(err.to_string().contains("configs/ci.toml"), "{err}");

    let ci = CharTokenizer::from_text(&common::root_file("data/ci.txt")).unwrap();
    let tune = tunes.get("浣溪沙").unwrap(); // 7。7。7。7，7。7。
    let err = tune_start(&ci, (tune, 1, None), "一曲新词，", 300)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("character 5 is"),
        "the prompt's 5th (the header the program writes not counted): {err}"
    );
    let err = tune_start(&ci, (tune, 1, None), "【菩萨蛮】", 300)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("character 1 is"), "{err}");
    let err = tune_start(&ci, (tune, 1, None), "", 20)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("浣溪沙 needs 49 more"), "{err}");
    assert!(tune_start(&ci, (tune, 1, None), "一曲新词酒一杯。去年", 300).is_ok());
}

#[test]
fn a_tunes_other_forms_are_learned_asked_for_by_number_or_pattern_and_written() {
    // 甲: 10 ci of 3，2。, 6 of 3。2。 (又一体: 60 % of the commonest, at least 5), 1 of 5。.
    let mut ci = vec![("甲", "一二三，四五。"); 10];
    ci.extend(vec![("甲", "一二三。四五。"); 6]);
    ci.push(("甲", "一二三四五。"));
    let tunes = Tunes::learn(ci);
    let tune = tunes.get("甲").unwrap();
    let forms: Vec<(usize, String, usize)> = tune
        .forms()
        .map(|(n, p, ci)| (n, p.to_string(), ci))
        .collect();
    assert_eq!(
        forms,
        [(1, "3，2。".into(), 10), (2, "3。2。".into(), 6)],
        "one ci of 17 is under a tenth"
    );
    let again = Tunes::parse(&tunes.to_tsv()).unwrap();
    assert_eq!(again.to_tsv(), tunes.to_tsv(), "the table reads back");
    assert_eq!(tune.choose_form(""), Ok(1));
    assert_eq!(tune.choose_form("2"), Ok(2));
    assert_eq!(tune.choose_form("3。2。"), Ok(2));
    assert_eq!(tune.choose_form("3。2。×6"), Ok(2), "as cipu.tsv writes it");
    for bad in ["0", "3", "3，3。", "二", "-1", "3。2。×abc", "3。2。×"] {
        let err = tune.choose_form(bad).unwrap_err();
        assert!(
            err.contains("1: 3，2。 (10 ci), 2: 3。2。 (6 ci)"),
            "{bad}: the forms listed: {err}"
        );
    }
    assert_eq!(tune.form_of("一二三。四五。"), Some(2));
    assert_eq!(tune.form_of("一二三四五。"), None);

    // The shipped 水调歌头: 苏轼's 明月几时有 is its form 3 (4，7 after 3，3，3), and a ci of that
    // form is scored by that form's tones and rhymes.
    let shuidiao = Tunes::shipped().get("水调歌头").unwrap();
    let sushi = "明月几时有，把酒问青天。不知天上宫阙，今夕是何年。我欲乘风归去，又恐琼楼玉宇，高处不胜寒。\
                 起舞弄清影，何似在人间。转朱阁，低绮户，照无眠。不应有恨，何事长向别时圆。\
                 人有悲欢离合，月有阴晴圆缺，此事古难全。但愿人长久，千里共婵娟。";
    assert_eq!(shuidiao.form_of(sushi), Some(3));
    let score = score_ci(&format!("【水调歌头】{sushi}"), Tunes::shipped()).unwrap();
    assert!(score.fits && score.form == Some(3), "{}", score.describe());
    let meter = score.meter.as_ref().expect("form 3 has learned tones");
    assert_eq!(
        (meter.rhyme_positions, meter.rhyming),
        (8, 8),
        "{}",
        score.describe()
    );

    // Written in form 3 by a random model: its pattern, not the commonest's.
    let text = common::root_file("data/ci.txt");
    let tokenizer = CharTokenizer::from_text(&text).unwrap();
    let model = common::random_model(&tokenizer, 3);
    let mut generator = Generator::new(&model);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let start = tune_start(&tokenizer, (shuidiao, 3, None), "", 300).unwrap();
    let gen = Generation::new(300, Sampling::with_temperature(1.0), Some(start.opening[0]));
    let written = generator
        .write(&start, &gen, &mut rng, &mut |_| {})
        .unwrap();
    let written = tokenizer.decode(&written).unwrap();
    assert_eq!(shuidiao.form_of(written.trim_end()), Some(3), "{written}");
    let err = tune_start(&tokenizer, (shuidiao, 9, None), "", 300)
        .err()
        .unwrap();
    assert!(err.to_string().contains("give a number from 1 to"), "{err}");
}

#[test]
fn a_prompt_of_another_form_is_answered_with_that_form() {
    use shige::config::{CorpusKind, DataConfig};
    use shige::sample::ci_start;
    let tokenizer = CharTokenizer::from_text(&common::root_file("data/ci.txt")).unwrap();
    let data = DataConfig {
        kind: CorpusKind::Lines,
        ..DataConfig::default()
    };
    let start = |form: &str, prompt: &str| {
        ci_start((&tokenizer, &data), ("水调歌头", form, false), prompt, 300)
            .err()
            .map(|e| e.to_string())
    };
    // 4，7 after 3，3，3 is forms 2 and 3, not 1: the commonest that fits is named.
    let prompt = "明月几时有，把酒问青天。不知天上，";
    let err = start("", prompt).expect("form 1 has 6 characters there");
    assert!(
        err.ends_with("the prompt fits form 2 of 水调歌头: add --tune-form 2"),
        "{err}"
    );
    assert_eq!(start("2", prompt), None);
    // Asked for another form than the one it fits: "give", not "add".
    let err = start("2", "明月几时有，把酒问青天。不知天上宫阙，").unwrap();
    assert!(
        err.ends_with("fits form 1 of 水调歌头: give --tune-form 1"),
        "{err}"
    );
    // With --meter, a form whose tones were not learned (少年游's form 2) is named as such.
    let shaonianyou =
        "春风吹雨过江城。春风吹雨过。春风吹雨，春风吹雨，春风吹雨过。春风吹雨过江城，春风吹、";
    let err = ci_start((&tokenizer, &data), ("少年游", "", true), shaonianyou, 300)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.ends_with("give --tune-form 2 without --meter (its tones were not learned)"),
        "{err}"
    );
    // A prompt no form fits keeps its message alone; one that fits but is too long for the
    // characters asked for gets no hint.
    let err = start("", "明月，").unwrap();
    assert!(!err.contains("--tune-form"), "{err}");
    let err = ci_start(
        (&tokenizer, &data),
        ("水调歌头", "", false),
        "明月几时有，",
        10,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("--max-new-tokens") && !err.contains("--tune-form"),
        "{err}"
    );
}
