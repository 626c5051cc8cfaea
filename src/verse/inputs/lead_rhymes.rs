//! The lead rhymes (`lead_rhymes`): three biases on next-token logits at a poem's first two rhymes,
//! where the rhyme biases ([`super::rhymes`]) wait for two rhymes to agree, fitted to the trained
//! model instead of trained with it ([`crate::train::fit`]):
//!
//! - at the first rhyme (the 2nd line's end), one for every character of a 平声 group: a
//!   regulated poem rhymes in 平;
//! - at the second (the 4th line's end), one for the characters that share a group with the first
//!   rhyme where the first line's end does not, and one for those that share a group with both
//!   where it does (首句入韵): a quatrain has no third rhyme, where the rhyme biases begin.
//!
//! Trained with the model, the second rhyme's biases cost 0.02 nats over the whole split: the
//! model leaves the rhyme to them and learns less of it for the positions they do not reach (a
//! window that starts inside a poem). Fitted after the last step to the model as trained, they
//! change nothing it learns, and each makes the model's probability of its characters at its
//! positions what the training poems show there (docs/experiments.md, section 22).

use super::rhymes::{RhymeReader, Rhymes};
use super::vocabulary::{TokenKinds, Vocabulary};
use crate::model::inputs::{BiasInput, BiasReader, Biased, Reads};
use crate::verse::tables::common_groups;
use std::sync::Arc;

/// The bias at the first rhyme of every character of a 平声 group.
const LEVEL: usize = 0;
/// The bias at the second rhyme of what rhymes with the first, the first line's end not rhyming.
const SECOND: usize = 1;
/// The bias at the second rhyme of what rhymes with the first line's end and the first rhyme.
const SECOND_AGREED: usize = 2;
/// The lead rhymes' biases.
pub const BIASES: usize = 3;

/// What each token is to a poem, its rhyme groups, and the tokens of a 平声 group.
struct LeadRhymes {
    kinds: TokenKinds,
    rhymes: Arc<Rhymes>,
    level: Arc<Vec<u32>>,
}

impl BiasInput for LeadRhymes {
    fn biases(&self) -> usize {
        BIASES
    }

    fn reader(&self) -> Box<dyn BiasReader> {
        Box::new(LeadRhymeReader {
            lines: RhymeReader::new(&self.kinds),
            rhymes: self.rhymes.clone(),
            level: self.level.clone(),
        })
    }
}

/// A [`RhymeReader`] that gives the lead rhymes' biases.
struct LeadRhymeReader {
    lines: RhymeReader,
    rhymes: Arc<Rhymes>,
    level: Arc<Vec<u32>>,
}

impl BiasReader for LeadRhymeReader {
    fn read(&mut self, id: u32) -> Biased {
        let rhymes = &self.rhymes;
        match self.lines.finals_before_rhyme(id) {
            // Before the first rhyme: the first line's end alone has been read.
            Some([_]) => self.level.iter().map(|&t| (t, LEVEL)).collect(),
            // Before the second: the first line's end, the first rhyme and the third line's end.
            Some(&[opening, first, _]) => {
                let first = &rhymes.groups[first as usize];
                let agreed = common_groups(Some(&rhymes.groups[opening as usize]), first);
                let (groups, bias) = match agreed.is_empty() {
                    true => (&first[..], SECOND),
                    false => (&agreed[..], SECOND_AGREED),
                };
                let tokens = rhymes.tokens_of(groups);
                tokens.into_iter().map(|t| (t, bias)).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The lead rhymes' biases for tokens that are `vocabulary`'s characters.
pub fn reads(vocabulary: &Vocabulary) -> Reads {
    let rhymes = Rhymes::of(vocabulary);
    let level = (0..rhymes.groups.len() as u32)
        .filter(|&t| !rhymes.groups[t as usize].is_empty())
        .collect();
    Reads::Bias(Arc::new(LeadRhymes {
        kinds: TokenKinds::of(vocabulary),
        rhymes: Arc::new(rhymes),
        level: Arc::new(level),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The characters biased before each position of `text`, with their bias (a character may
    /// have several ids: one per position).
    fn biased(text: &str) -> Vec<Vec<(char, usize)>> {
        let vocabulary = Vocabulary::new(text.chars().zip(0..));
        let Reads::Bias(input) = reads(&vocabulary) else {
            panic!("a next-token bias")
        };
        assert_eq!(input.biases(), BIASES);
        let chars: Vec<char> = text.chars().collect();
        let mut reader = input.reader();
        (0..chars.len() as u32)
            .map(|id| {
                let read = reader.read(id);
                let mut ids: Vec<u32> = read.iter().map(|&(t, _)| t).collect();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), read.len(), "each token once (the fit needs it)");
                let mut entries: Vec<(char, usize)> = read
                    .into_iter()
                    .map(|(t, bias)| (chars[t as usize], bias))
                    .collect();
                entries.sort_unstable();
                entries.dedup();
                entries
            })
            .collect()
    }

    fn entries(chars: &str, bias: usize) -> Vec<(char, usize)> {
        let mut all: Vec<(char, usize)> = chars.chars().map(|c| (c, bias)).collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn the_first_rhyme_takes_the_level_characters_the_second_what_rhymes_with_the_first() {
        let text = "\n国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。\
                    烽火连三月，家书抵万金。\n朝辞白帝彩云间，千里江陵一日还。\
                    两岸猿声啼不住，轻舟已过万重山。\n";
        let biased = biased(text);
        let at = |c: char, nth: usize| text.chars().enumerate().filter(|&(_, x)| x == c).nth(nth);
        let before = |c: char, nth: usize| at(c, nth).expect("in the text").0 - 1;
        // Before 深, the first rhyme: every character of a 平声 group (those of the tables').
        let level: String = text
            .chars()
            .filter(|&c| {
                !crate::verse::tables::Tables::shipped()
                    .rhyme_groups(c)
                    .is_empty()
            })
            .collect::<std::collections::BTreeSet<char>>()
            .into_iter()
            .collect();
        assert!(level.contains('深') && level.contains('山') && !level.contains('在'));
        assert_eq!(biased[before('深', 0)], entries(&level, LEVEL));
        // Before 心: what rhymes with 深 (侵), the first line (在) not rhyming.
        assert_eq!(biased[before('心', 0)], entries("深心金", SECOND));
        // 早发白帝城: before 还 the level characters; before 山 what rhymes with 间 and 还 (删),
        // its first line rhyming.
        assert_eq!(biased[before('还', 0)], entries(&level, LEVEL));
        assert_eq!(biased[before('山', 1)], entries("间还山", SECOND_AGREED));
        let taken: Vec<usize> = (0..biased.len())
            .filter(|&i| !biased[i].is_empty())
            .collect();
        let expected = [
            before('深', 0),
            before('心', 0),
            before('还', 0),
            before('山', 1),
        ];
        assert_eq!(
            taken, expected,
            "no third rhyme, and a new poem starts afresh"
        );
    }

    #[test]
    fn a_window_inside_a_poem_and_a_rhyme_of_no_level_group_take_none() {
        // A window that starts inside a poem knows no rhyme until its next poem; 春晓 rhymes in
        // 仄 (晓, 鸟, 少): before 鸟 the level characters, before 少 nothing rhymes with 鸟.
        let text = "感时花溅泪，恨别鸟惊心。\n春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\n";
        let biased = biased(text);
        let chars: Vec<char> = text.chars().collect();
        let position = |c: char| chars.iter().rposition(|&x| x == c).expect("in the text");
        let taken: Vec<usize> = (0..biased.len())
            .filter(|&i| !biased[i].is_empty())
            .collect();
        assert_eq!(taken, [position('鸟') - 1]);
        assert!(biased[position('鸟') - 1].iter().all(|&(_, b)| b == LEVEL));
    }
}
