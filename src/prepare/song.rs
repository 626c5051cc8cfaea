//! The larger corpus of the ladder (#71): the Tang training poems of data/poems.txt and the
//! package's regular Song poems (`dist/quantangshi/poet.song.N.json`, built as data/poems.txt is),
//! none of them a Tang poem again nor sharing a line with a held-out one, so that a run on it
//! measured on data/poems.txt's held-out poems (`[data] validation`) never read them, and none
//! holding a character that data/poems.txt does not: its vocabulary is the Tang poems' own, so the
//! model's output layer (a third of its products at 4 × 256) grows by no Song character that
//! the held-out poems never ask for.

use super::poems::{Kept, PrepareStats};
use crate::data::held_out::HeldLines;
use crate::data::poem::{regular_form, Form};
use crate::data::{Corpus, CorpusKind};
use std::collections::HashSet;

/// What the larger corpus holds and left out.
#[derive(Debug, Default)]
pub struct TangSong {
    /// The poems, one per line: the Tang training poems, then the Song poems kept.
    pub poems: Vec<String>,
    /// Tang training poems (those of data/poems.txt that it does not hold out) kept.
    pub tang: usize,
    /// Tang training poems left out for sharing a line with a held-out one.
    pub tang_sharing: usize,
    /// Song poems kept.
    pub song: usize,
    /// Song poems left out for being a Tang poem (of either side of the split) again.
    pub repeats: usize,
    /// Song poems left out for sharing a line with a held-out Tang poem.
    pub sharing: usize,
    /// Song poems left out for holding a character that no poem of data/poems.txt holds.
    pub new_characters: usize,
}

/// The Tang training poems of `tang` (data/poems.txt, its own split) of `forms` and the poems of
/// `song` that are no Tang poem, none sharing a line with a held-out one, each written in the
/// characters of `tang`.
pub fn tang_song(tang: &Corpus, song: &[Kept], forms: &[Form]) -> TangSong {
    let (train, held_out) = tang.split();
    let held_text: String = held_out.iter().map(|p| format!("{p}\n")).collect();
    let held = HeldLines::new(&held_text, CorpusKind::Verse, "");
    let every_tang: HashSet<&str> = tang.items.iter().map(String::as_str).collect();
    let tang_characters: HashSet<char> = tang.items.iter().flat_map(|p| p.chars()).collect();
    let mut corpus = TangSong::default();
    let asked = |poem: &str| regular_form(poem).is_some_and(|f| forms.contains(&f));
    for poem in train.into_iter().filter(|p| asked(p)) {
        match held.shares(poem) {
            true => corpus.tang_sharing += 1,
            false => corpus.poems.push(poem.to_string()),
        }
    }
    corpus.tang = corpus.poems.len();
    for kept in song {
        if every_tang.contains(kept.poem.as_str()) {
            corpus.repeats += 1;
        } else if held.shares(&kept.poem) {
            corpus.sharing += 1;
        } else if !kept.poem.chars().all(|c| tang_characters.contains(&c)) {
            corpus.new_characters += 1;
        } else {
            corpus.poems.push(kept.poem.clone());
            corpus.song += 1;
        }
    }
    corpus
}

/// The part of data/README.md on the larger corpus, built from `stats` (the Song poems read) by
/// `command`.
pub fn tang_song_readme(corpus: &TangSong, stats: &PrepareStats, command: &str) -> String {
    let characters: usize = corpus.poems.iter().map(|p| p.chars().count()).sum();
    format!(
        "\n# The larger corpus: Tang and Song regular verse (tang_song.txt)\n\n\
         `tang_song.txt` holds {total} poems, one per line: the {tang} Tang training poems of `poems.txt`\n\
         (those it does not hold out, in order, less {tang_sharing} that share a line with a held-out one),\n\
         then {song} regular-form Song poems of the same package (`dist/quantangshi/poet.song.*.json`:\n\
         {read} read, {irregular} not regular verse, {dup} duplicates), filtered as `poems.txt` is. Left out:\n\
         {repeats} Song poems that are a Tang poem again, {sharing} that share a line (a sentence of at least 4\n\
         characters) with a held-out Tang poem, {new_characters} that hold a character no poem of `poems.txt` holds\n\
         (the vocabulary stays the Tang poems'). {characters} characters ({mb:.0} MB), shipped (in git, whose\n\
         packs compress it to about half) as the command below builds it. A run on it is measured on the held-out poems of `poems.txt` (`validation =\n\
         \"data/poems.txt\"` in [data], which `train` checks it does not hold) and may end on the Tang poems\n\
         (`decay_corpus = \"data/poems.txt\"`: the schedule's decay trains on them).\n\n\
         ```\n{command}\n```\n",
        total = corpus.poems.len(),
        tang = corpus.tang,
        tang_sharing = corpus.tang_sharing,
        song = corpus.song,
        read = stats.read,
        irregular = stats.irregular,
        dup = stats.duplicates,
        repeats = corpus.repeats,
        sharing = corpus.sharing,
        new_characters = corpus.new_characters,
        mb = characters as f64 * 3.0 / 1e6,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::run_text::tests::poem_of;
    use crate::data::CorpusKind;
    use std::path::Path;

    fn kept(poem: &str) -> Kept {
        Kept {
            poem: poem.to_string(),
            header: String::new(),
        }
    }

    #[test]
    fn poems_that_repeat_share_a_held_out_line_or_hold_new_characters_are_left_out() {
        // 40 Tang poems: the 20th and 40th are held out.
        let mut tang: Vec<String> = (0..40).map(poem_of).collect();
        let held_out = tang[19].clone();
        let held_line: String = held_out.chars().skip(6).take(5).collect();
        let sharing = |n: u32| poem_of(n).replacen(&poem_of(n)[..15], &held_line, 1);
        tang[5] = sharing(100); // a Tang training poem with the held-out poem's second line
        let text: String = tang.iter().map(|p| format!("{p}\n")).collect();
        let corpus = Corpus::parse(&text, Path::new("t"), CorpusKind::Verse).unwrap();
        // A Song poem in the Tang poems' characters (the 8th's couplets the other way round).
        let eighth = poem_of(7);
        let (first, second) = eighth.split_at(eighth.len() / 2);
        let in_tang_characters = format!("{second}{first}");
        let song = [
            kept(&tang[3]),
            kept(&held_out),
            kept(&sharing(101)),
            kept(&in_tang_characters),
            kept(&poem_of(102)), // characters no Tang poem holds
        ];
        let built = tang_song(&corpus, &song, &Form::ALL);
        let counts = (built.tang, built.tang_sharing, built.song);
        assert_eq!(counts, (37, 1, 1));
        let left_out = (built.repeats, built.sharing, built.new_characters);
        assert_eq!(left_out, (2, 1, 1));
        assert_eq!(built.poems.len(), 38);
        assert!(!built.poems.contains(&held_out) && !built.poems.contains(&tang[5]));
        assert_eq!(built.poems.last().unwrap(), &in_tang_characters);
        // Only the forms asked, Tang and Song alike (these are all 五绝).
        let qijue = tang_song(&corpus, &song, &[Form::Qijue]);
        assert_eq!(
            (qijue.tang, qijue.song),
            (0, 1),
            "the Song poems come filtered"
        );
    }
}
