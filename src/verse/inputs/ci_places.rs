//! Ci places (`"ci_places"`): where each position of a ci stands in its tune, a sequence input of
//! the GPT (`model::inputs`), read from the ci's own header: `【菩萨蛮】` names the tune, whose 词谱
//! with tones ([`crate::verse::tune_meters`]) gives its sentences' lengths and rhyme segments. The
//! shi learn where they rhyme from [`super::places`]; a ci's rhymes stand where its tune puts them.
//!
//! After token t (the position that predicts token t + 1) it takes the rows of W
//! (`transformer.wcp.weight`) for
//! - its place in its sentence: 0 right after the header or a mark (，、。), then 1, 2, … (7 and
//!   beyond: 7), "unknown" before a header or newline says where a ci begins;
//! - where the ci keeps its tune's sentences: how far the next character is from the sentence's
//!   end (0: the next is its mark, 1: the next ends it, … 8 and beyond: 8);
//! - where the next character ends a rhyming sentence: its segment's tone classes (平, 上去, 入),
//!   and whether it is the segment's first rhyme (where a ci chooses its 部, or changes it: 换韵).
//!
//! Ci rhyme biases (`"ci_rhyme_bias"`): at the same positions, learned biases on next-token logits
//! (`transformer.bcr.weight`): at a segment's first rhyme, one for the characters with a 部 of its
//! classes; after it, one for the characters that ended the ci's earlier rhymes (which poets do
//! not rhyme on again), and for the other characters that share a 部 with every earlier rhyme of
//! the segment (in its classes; in any, where they share none there: a ci follows the rhyme it
//! began), one after its first rhyme and one after two or more.

use super::vocabulary::{TokenKind, TokenKinds, Vocabulary};
use crate::model::inputs::{
    BiasInput, BiasReader, Biased, Reads, SequenceInput, SequenceReader, Shares,
};
use crate::verse::cilin::{Bu, Cilin, RhymeClass};
use crate::verse::tune_meters::{TuneMeter, TuneMeters};
use crate::verse::tunes::CI_MARKS;
use std::collections::HashMap;
use std::sync::Arc;

/// Places 0..=7, then "unknown".
const PLACE_ROWS: usize = 9;
/// Distances to the sentence's end 0..=8; they follow the places.
const END_ROWS: usize = 9;
/// The rows of "the next ends a rhyming sentence of class 平, 上去, 入".
const RHYME_CLASS: usize = PLACE_ROWS + END_ROWS;
/// The row of "… and it is its segment's first rhyme".
const FIRST_RHYME: usize = RHYME_CLASS + RhymeClass::ALL.len();
/// Rows of W.
pub const ROWS: usize = FIRST_RHYME + 1;

/// The bias of a character that ended an earlier rhyme of the segment.
const REPEATED: usize = 0;
/// The bias of a character sharing a 部 with the segment's one earlier rhyme.
const RHYMING_AFTER_ONE: usize = 1;
/// The bias of a character sharing a 部 with the segment's two or more earlier rhymes.
const RHYMING_AFTER_MORE: usize = 2;
/// The bias of a character with a 部 of the segment's class, at its first rhyme.
const IN_CLASS: usize = 3;
/// Biases of `ci_rhyme_bias`.
pub const BIASES: usize = 4;

/// What a ci reader needs of each token id: its kind and its character; and each 部's tokens, and
/// each class's (in [`RhymeClass::ALL`]'s order).
struct CiVocabulary {
    kinds: TokenKinds,
    chars: Vec<Option<char>>,
    members: HashMap<Bu, Vec<u32>>,
    of_class: Vec<Vec<u32>>,
}

impl CiVocabulary {
    fn of(vocabulary: &Vocabulary) -> Self {
        let cilin = Cilin::shipped();
        let chars: Vec<Option<char>> = (0..vocabulary.len())
            .map(|id| vocabulary.char(id))
            .collect();
        let bu: Vec<Vec<Bu>> = chars
            .iter()
            .map(|c| c.map_or(Vec::new(), |c| cilin.bu(c).to_vec()))
            .collect();
        let mut members: HashMap<Bu, Vec<u32>> = HashMap::new();
        for (id, bu) in bu.iter().enumerate() {
            for &b in bu {
                members.entry(b).or_default().push(id as u32);
            }
        }
        let of_class = RhymeClass::ALL
            .iter()
            .map(|&class| {
                let ids =
                    (0..bu.len() as u32).filter(|&id| bu[id as usize].iter().any(|b| b.1 == class));
                ids.collect()
            })
            .collect();
        CiVocabulary {
            kinds: TokenKinds::of(vocabulary),
            chars,
            members,
            of_class,
        }
    }
}

/// Where a reader stands in a ci.
#[derive(Clone)]
enum Standing {
    /// Before a header or newline: nothing known.
    Unknown,
    /// Inside a header, its text so far.
    Header(String),
    /// In a poem: the meter of its tune's form that its sentences so far keep, if its header named
    /// a tune that has one and one of its forms fits.
    Poem(Option<&'static TuneMeter>),
}

/// Where the next character stands against the tune: its sentence's rhyme segment (and class) if
/// it ends a rhyming sentence.
struct Next {
    rows: Shares,
    rhyme: Option<(usize, &'static [RhymeClass])>,
}

/// A ci read token by token: its tune's form, its sentences so far, and its place.
struct CiReader {
    vocabulary: Arc<CiVocabulary>,
    standing: Standing,
    /// Each sentence so far: its length and mark (its shape), and the character that ended it.
    sentences: Vec<((usize, char), Option<u32>)>,
    place: usize,
    /// The last character read, if the last token was one.
    last: Option<u32>,
}

impl CiReader {
    fn new(vocabulary: &Arc<CiVocabulary>) -> Self {
        CiReader {
            vocabulary: vocabulary.clone(),
            standing: Standing::Unknown,
            sentences: Vec::new(),
            place: 0,
            last: None,
        }
    }

    /// Starts a poem of `meter`'s tune form (or of none).
    fn begin(&mut self, meter: Option<&'static TuneMeter>) {
        self.standing = Standing::Poem(meter);
        self.sentences.clear();
        (self.place, self.last) = (0, None);
    }

    /// Reads token `id`: the rows of the position that holds it, and the next character's rhyme.
    fn read(&mut self, id: u32) -> Next {
        let c = self.vocabulary.chars.get(id as usize).copied().flatten();
        match (self.vocabulary.kinds.get(id), &mut self.standing) {
            (TokenKind::PoemEnd, _) => self.begin(None),
            (TokenKind::HeaderStart, _) => self.standing = Standing::Header(String::new()),
            (TokenKind::HeaderEnd, Standing::Header(name)) => {
                let meter = TuneMeters::shipped().get(name);
                self.begin(meter);
            }
            (TokenKind::HeaderEnd, _) => self.standing = Standing::Unknown,
            (_, Standing::Header(name)) => name.extend(c),
            (_, Standing::Unknown) => {}
            (_, Standing::Poem(meter)) => match c.filter(|c| CI_MARKS.contains(c)) {
                Some(mark) => {
                    self.sentences.push(((self.place, mark), self.last));
                    *meter = meter.and_then(|m| form_keeping(m, &self.sentences));
                    (self.place, self.last) = (0, None);
                }
                None => (self.place, self.last) = (self.place + 1, Some(id)),
            },
        }
        self.next()
    }

    /// The characters that ended the rhyming sentences so far of `meter`'s rhyme segment
    /// `segment` (of every segment where `None`).
    fn finals(&self, meter: &TuneMeter, segment: Option<usize>) -> Vec<u32> {
        let of_segment = self.sentences.iter().zip(&meter.sentences);
        of_segment
            .filter(|(_, m)| m.2.is_some() && segment.is_none_or(|s| m.2 == Some(s)))
            .filter_map(|(s, _)| s.1)
            .collect()
    }

    /// The rows of the position just read, and the next character's rhyme with the segment's
    /// rhymes so far.
    fn next(&self) -> Next {
        let Standing::Poem(meter) = self.standing else {
            return Next {
                rows: vec![(PLACE_ROWS - 1, 1.0)],
                rhyme: None,
            };
        };
        let mut rows = vec![(self.place.min(PLACE_ROWS - 2), 1.0)];
        let sentence = meter.and_then(|m| Some((m, m.sentences.get(self.sentences.len())?)));
        let Some((meter, (slots, _, segment))) = sentence else {
            return Next { rows, rhyme: None };
        };
        let Some(to_end) = slots.len().checked_sub(self.place) else {
            return Next { rows, rhyme: None };
        };
        rows.push((PLACE_ROWS + to_end.min(END_ROWS - 1), 1.0));
        let rhyme = segment
            .filter(|_| to_end == 1)
            .map(|s| (s, &meter.segments[s][..]));
        if let Some((segment, classes)) = rhyme {
            for (index, class) in RhymeClass::ALL.iter().enumerate() {
                if classes.contains(class) {
                    rows.push((RHYME_CLASS + index, 1.0));
                }
            }
            if self.finals(meter, Some(segment)).is_empty() {
                rows.push((FIRST_RHYME, 1.0));
            }
        }
        Next { rows, rhyme }
    }

    /// The biases before the next character, where it ends a rhyming sentence.
    fn biases(&self, next: &Next) -> Biased {
        let (Some((segment, classes)), Standing::Poem(Some(meter))) = (next.rhyme, &self.standing)
        else {
            return Vec::new();
        };
        let finals = &self.finals(meter, Some(segment));
        if finals.is_empty() {
            let of_classes = RhymeClass::ALL
                .iter()
                .zip(&self.vocabulary.of_class)
                .filter(|(class, _)| classes.contains(class))
                .flat_map(|(_, ids)| ids);
            return distinct(of_classes.map(|&t| (t, IN_CLASS)));
        }
        // The ci's earlier rhymes (of any segment) take their own bias alone: raised with what
        // rhymes, it would have to learn to undo that rise.
        let earlier = self.finals(meter, None);
        let mut biased: Biased = earlier.iter().map(|&f| (f, REPEATED)).collect();
        let bias = match finals.len() {
            1 => RHYMING_AFTER_ONE,
            _ => RHYMING_AFTER_MORE,
        };
        let in_classes = self.shared(finals, Some(classes));
        let (shared, classes) = match in_classes.is_empty() {
            true => (self.shared(finals, None), &RhymeClass::ALL[..]),
            false => (in_classes, classes),
        };
        let members = shared.iter().flat_map(|&n| {
            let of = classes
                .iter()
                .filter_map(move |&class| self.vocabulary.members.get(&(n, class)));
            of.flatten()
        });
        let fresh = members.filter(|t| !earlier.contains(t));
        biased.extend(distinct(fresh.map(|&t| (t, bias))));
        biased
    }

    /// The 部 (their numbers, in `classes`, or in any) every one of `finals` has.
    fn shared(&self, finals: &[u32], classes: Option<&[RhymeClass]>) -> Vec<u8> {
        let of = |f: &u32| -> Vec<u8> {
            let c = self.vocabulary.chars.get(*f as usize).copied().flatten();
            let classes = classes.unwrap_or(&RhymeClass::ALL);
            c.map_or(Vec::new(), |c| Cilin::shipped().numbers_in(c, classes))
        };
        let all = finals.iter().map(of);
        all.reduce(|a, b| a.into_iter().filter(|x| b.contains(x)).collect())
            .unwrap_or_default()
    }
}

/// `entries` in token order, each token once (a token of one 部 in two classes would otherwise
/// take its bias twice).
fn distinct(entries: impl Iterator<Item = (u32, usize)>) -> Biased {
    let mut entries: Biased = entries.collect();
    entries.sort_unstable();
    entries.dedup();
    entries
}

/// `meter`, or another form of its tune, whose sentences begin with the lengths of `sentences`
/// (the package's marks vary: a form with their marks too, else the commonest); `None` where no
/// form does.
fn form_keeping(
    meter: &'static TuneMeter,
    sentences: &[((usize, char), Option<u32>)],
) -> Option<&'static TuneMeter> {
    let keeps = |m: &TuneMeter, marks: bool| {
        m.sentences.len() >= sentences.len()
            && m.sentences
                .iter()
                .zip(sentences)
                .all(|(form, ((length, mark), _))| {
                    form.0.len() == *length && (!marks || form.1 == *mark)
                })
    };
    if keeps(meter, false) {
        return Some(meter);
    }
    let forms = || TuneMeters::shipped().forms_of(&meter.name);
    let mut with_marks = forms().filter(|m| keeps(m, true));
    with_marks
        .next()
        .or_else(|| forms().find(|m| keeps(m, false)))
}

struct CiPlaces(Arc<CiVocabulary>);

impl SequenceInput for CiPlaces {
    fn rows(&self) -> usize {
        ROWS
    }

    fn reader(&self) -> Box<dyn SequenceReader> {
        Box::new(CiReader::new(&self.0))
    }
}

impl SequenceReader for CiReader {
    fn read(&mut self, id: u32) -> Shares {
        CiReader::read(self, id).rows
    }
}

struct CiRhymeBias(Arc<CiVocabulary>);

impl BiasInput for CiRhymeBias {
    fn biases(&self) -> usize {
        BIASES
    }

    fn reader(&self) -> Box<dyn BiasReader> {
        Box::new(CiReader::new(&self.0))
    }
}

impl BiasReader for CiReader {
    fn read(&mut self, id: u32) -> Biased {
        let next = CiReader::read(self, id);
        self.biases(&next)
    }
}

/// The ci places of tokens that are `vocabulary`'s characters.
pub fn reads(vocabulary: &Vocabulary) -> Reads {
    Reads::Sequence(Arc::new(CiPlaces(Arc::new(CiVocabulary::of(vocabulary)))))
}

/// The ci rhyme biases of tokens that are `vocabulary`'s characters.
pub fn rhyme_bias(vocabulary: &Vocabulary) -> Reads {
    Reads::Bias(Arc::new(CiRhymeBias(Arc::new(CiVocabulary::of(
        vocabulary,
    )))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The positions of `text` read by a fresh reader: rows and biases.
    fn read_all(text: &str) -> (Vec<Shares>, Vec<Biased>) {
        let vocabulary = Arc::new(CiVocabulary::of(&Vocabulary::new(text.chars().zip(0..))));
        let mut reader = CiReader::new(&vocabulary);
        (0..text.chars().count() as u32)
            .map(|id| {
                let next = CiReader::read(&mut reader, id);
                let biased = reader.biases(&next);
                (next.rows, biased)
            })
            .unzip()
    }

    fn rows(shares: &Shares) -> Vec<usize> {
        shares.iter().map(|s| s.0).collect()
    }

    #[test]
    fn a_pusaman_rhymes_where_its_tune_says_and_changes_rhyme_by_segment() {
        // 菩萨蛮 (李白): rhymes 织/碧, 楼/愁, 立/急, 程/亭.
        let text = "\n【菩萨蛮】平林漠漠烟如织，寒山一带伤心碧。暝色入高楼，有人楼上愁。\
                    玉阶空伫立，宿鸟归飞急。何处是归程，长亭更短亭。";
        let chars: Vec<char> = text.chars().collect();
        let id = |c: char| chars.iter().position(|&x| x == c).unwrap() as u32;
        let (read, biases) = read_all(text);
        assert!(
            read[1..5].iter().all(|r| rows(r) == [PLACE_ROWS - 1]),
            "the header"
        );
        // 】 (5): place 0, and the sentence's end 7 characters after the next.
        assert_eq!((chars[5], rows(&read[5])), ('】', vec![0, PLACE_ROWS + 7]));
        // 如 (11): the next (织) ends sentence 1, the first rhyme of a segment of 上去 or 入.
        let (shang_qu, ru) = (RHYME_CLASS + 1, RHYME_CLASS + 2);
        assert_eq!(chars[11], '如');
        assert_eq!(
            rows(&read[11]),
            [6, PLACE_ROWS + 1, shang_qu, ru, FIRST_RHYME]
        );
        // No earlier rhyme in the segment: the characters of its classes, each once: 织 (第三部
        // 上去 and 第十七部 入), 碧 (入) and 处 (上去); not 楼 (平).
        let vocabulary = Vocabulary::new(chars.iter().copied().chain("处".chars()).zip(0..));
        let of_class = &CiVocabulary::of(&vocabulary).of_class;
        assert!(of_class[1].contains(&(chars.len() as u32)), "处 is 上去");
        let first: Vec<u32> = biases[11].iter().map(|b| b.0).collect();
        assert!(biases[11].iter().all(|b| b.1 == IN_CLASS));
        let mut expected: Vec<u32> = [&of_class[1][..], &of_class[2][..]].concat();
        expected.retain(|&t| t < chars.len() as u32);
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(first, expected);
        assert!(
            first.contains(&id('织')) && first.contains(&id('碧')) && !first.contains(&id('楼'))
        );
        // 心 (19): the next (碧) rhymes after 织, which is not to end it again (its own bias alone);
        // what else shares 织's 部 in the classes (第三部 上去, 第十七部 入) is raised, 碧 among them.
        assert_eq!(chars[19], '心');
        assert_eq!(rows(&read[19]), [6, PLACE_ROWS + 1, shang_qu, ru]);
        let zhi_biases: Vec<usize> = biases[19]
            .iter()
            .filter(|b| b.0 == id('织'))
            .map(|b| b.1)
            .collect();
        assert_eq!(zhi_biases, [REPEATED]);
        assert!(biases[19].contains(&(id('碧'), RHYMING_AFTER_ONE)));
        // A segment that begins off its classes follows the rhyme it began: the 平 segment begun
        // on 处 (第四部 上去) raises what shares 第四部, 去 among them.
        let off = "\n【菩萨蛮】平林漠漠烟如织，寒山一带伤心碧。暝色入高处，有人楼上去。";
        let off_chars: Vec<char> = off.chars().collect();
        let (_, off_biases) = read_all(off);
        let qu = off_chars.iter().rposition(|&c| c == '去').unwrap();
        assert!(off_biases[qu - 1].contains(&(qu as u32, RHYMING_AFTER_ONE)));
        // 碧 (20): the next is its mark; after the mark the next sentence starts at place 0.
        assert_eq!(rows(&read[20]), [7, PLACE_ROWS]);
        assert_eq!(rows(&read[21]), [0, PLACE_ROWS + 5]);
        // 高 (25): the next (楼) begins the 平 segment: a new rhyme.
        assert_eq!(chars[25], '高');
        assert_eq!(
            rows(&read[25]),
            [4, PLACE_ROWS + 1, RHYME_CLASS, FIRST_RHYME]
        );
        // 上 (31): 愁 follows 楼 (both 第十二部 平): the ci's earlier rhymes (织 碧 楼) repeated; 愁
        // (and the 楼 of 楼上, another token here) rhyme after one.
        assert_eq!(chars[31], '上');
        assert_eq!(rows(&read[31]), [4, PLACE_ROWS + 1, RHYME_CLASS]);
        assert!(!biases[31].contains(&(id('楼'), RHYMING_AFTER_ONE)));
        assert!(
            biases[31].contains(&(30, RHYMING_AFTER_ONE)),
            "the 楼 of 楼上"
        );
        for (c, bias) in [('楼', REPEATED), ('愁', RHYMING_AFTER_ONE)] {
            assert!(
                biases[31].contains(&(id(c), bias)),
                "{c} {bias}: {:?}",
                biases[31]
            );
        }
        assert!(
            biases[31].contains(&(id('织'), REPEATED)),
            "another segment's rhyme is not to be rhymed on again either"
        );
        // Biases before each rhyme, nowhere else.
        let biased: Vec<char> = (0..biases.len())
            .filter(|&i| !biases[i].is_empty())
            .map(|i| chars[i + 1])
            .collect();
        assert_eq!(biased, ['织', '碧', '楼', '愁', '立', '急', '程', '亭']);
    }

    #[test]
    fn a_poem_of_no_known_tune_takes_its_places_alone() {
        let (rows_read, biases) = read_all("\n【李白·静夜思】床前明月光，疑是地上霜。");
        assert!(biases.iter().all(Vec::is_empty));
        assert_eq!(rows(&rows_read[9]), [1], "床: place 1, no tune");
        assert_eq!(rows(&rows_read[14]), [0], "，: place 0");
        let (before_newline, _) = read_all("光，\n");
        assert_eq!(rows(&before_newline[0]), [PLACE_ROWS - 1]);
        assert_eq!(rows(&before_newline[2]), [0]);
    }

    #[test]
    fn a_ci_of_another_form_is_followed_once_its_sentences_leave_the_commonest() {
        // 苏轼's 水调歌头 keeps form 1 until 不应有恨 (4, where form 1 has 6): form 3 from there.
        let text = "\n【水调歌头】明月几时有，把酒问青天。不知天上宫阙，今夕是何年。我欲乘风归去，\
                    又恐琼楼玉宇，高处不胜寒。起舞弄清影，何似在人间。转朱阁，低绮户，照无眠。\
                    不应有恨，何事长向别时圆。人有悲欢离合，月有阴晴圆缺，此事古难全。\
                    但愿人长久，千里共婵娟。";
        let chars: Vec<char> = text.chars().collect();
        let (read, biases) = read_all(text);
        let before_rhymes: String = (0..read.len())
            .filter(|&i| rows(&read[i]).contains(&RHYME_CLASS))
            .map(|i| chars[i + 1])
            .collect();
        assert_eq!(before_rhymes, "天年寒间眠圆全娟");
        // At 时 (before 圆), 7 characters after 不应有恨: form 3's sentence, and 圆 rhymes with
        // the five before it (第七部 平).
        let shi = chars.iter().rposition(|&c| c == '时').unwrap();
        assert_eq!(rows(&read[shi]), [6, PLACE_ROWS + 1, RHYME_CLASS]);
        let yuan = (shi + 1) as u32;
        assert!(
            biases[shi].contains(&(yuan, RHYMING_AFTER_MORE)),
            "{:?}",
            biases[shi]
        );
        // A ci that keeps none of its tune's forms takes its places alone from there.
        let (lost, _) = read_all("\n【浣溪沙】一二三。四五六七八九。");
        assert_eq!(
            rows(&lost[9]),
            [0],
            "after a sentence of 3 where every form has 7"
        );
    }
}
