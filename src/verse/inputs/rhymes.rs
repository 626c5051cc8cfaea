//! Rhymes so far (`rhyme_memory = true`): at the position whose next character ends a line that
//! must rhyme (as [`super::places`] reads it), the rows of W (`transformer.wrm.weight`, one per
//! token) of the characters that ended the poem's earlier lines, a sequence input of the GPT
//! (`model::inputs`). With W's row of a character learned against its output row, the model can
//! learn not to rhyme on a character it has used (重韵), which the free samples do in about a
//! third of their regular poems (docs/experiments.md, section 11).
//!
//! Rhyme biases (`rhyme_bias = true`): at the same positions, two learned biases on next-token
//! logits (a next-token bias of the GPT): one for those same characters, which the real poems
//! almost never rhyme on again, and, from the poem's third rhyme on, one for the characters that
//! share a 平声 rhyme group with every earlier rhyme (the ends of the lines [`super::places`] says
//! must rhyme), which the real poems mostly do. From the second rhyme on, the second bias made the
//! loss worse (a poem whose first two rhymes do not agree is often one that does not rhyme);
//! from the third, both biases make it better (docs/experiments.md, sections 14 and 17).

use super::places::PoemReader;
use super::vocabulary::{TokenKind, TokenKinds, Vocabulary};
use crate::model::inputs::{
    BiasInput, BiasReader, Biased, Reads, SequenceInput, SequenceReader, Shares,
};
use crate::verse::tables::{common_groups, Tables};
use std::sync::Arc;

/// What each token is to a poem, by token id, and the rows of W (one per token).
struct RhymeMemory {
    kinds: TokenKinds,
    rows: usize,
}

impl SequenceInput for RhymeMemory {
    fn rows(&self) -> usize {
        self.rows
    }

    fn reader(&self) -> Box<dyn SequenceReader> {
        Box::new(RhymeReader::new(&self.kinds))
    }
}

/// The bias of an earlier line's end, before a rhyme.
const REPEATED: usize = 0;
/// The bias of a character that rhymes with every earlier rhyme.
const RHYMING: usize = 1;

/// What each token is to a poem and its rhyme groups, by token id: for the rhyme biases.
struct RhymeBias {
    kinds: TokenKinds,
    rhymes: Arc<Rhymes>,
}

/// Each token's 平声 rhyme groups, and each group's tokens.
pub(super) struct Rhymes {
    pub(super) groups: Vec<Vec<u16>>,
    members: Vec<Vec<u32>>,
}

impl Rhymes {
    /// The rhyme groups of `vocabulary`'s characters (the shipped tables).
    pub(super) fn of(vocabulary: &Vocabulary) -> Self {
        let tables = Tables::shipped();
        let groups: Vec<Vec<u16>> = (0..vocabulary.len())
            .map(|id| {
                vocabulary
                    .char(id)
                    .map_or(Vec::new(), |c| tables.rhyme_groups(c).to_vec())
            })
            .collect();
        let mut members = vec![Vec::new(); tables.group_count()];
        for (id, groups) in groups.iter().enumerate() {
            for &g in groups {
                members[g as usize].push(id as u32);
            }
        }
        Rhymes { groups, members }
    }

    /// The tokens of `groups`, each once (a character of two of them too), in id order.
    pub(super) fn tokens_of(&self, groups: &[u16]) -> Vec<u32> {
        let mut tokens: Vec<u32> = groups
            .iter()
            .flat_map(|&g| self.members[g as usize].iter().copied())
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }
}

impl BiasInput for RhymeBias {
    fn biases(&self) -> usize {
        2
    }

    fn reader(&self) -> Box<dyn BiasReader> {
        Box::new(RhymeBiasReader {
            lines: RhymeReader::new(&self.kinds),
            rhymes: self.rhymes.clone(),
            shared: None,
            rhymes_read: 0,
            rhyme_next: false,
        })
    }
}

/// Earlier rhymes of the poem that must share a group before the second bias applies: from the
/// third rhyme on, where a poem that rhymes has shown its group twice.
const AGREEING: usize = 2;

/// A [`RhymeReader`] that also keeps the rhyme groups every rhyme of the poem so far shares.
struct RhymeBiasReader {
    lines: RhymeReader,
    rhymes: Arc<Rhymes>,
    /// The groups shared by the poem's rhymes so far (`None` before its first).
    shared: Option<Vec<u16>>,
    /// The poem's rhymes so far.
    rhymes_read: usize,
    /// Whether the next token is a rhyme.
    rhyme_next: bool,
}

impl BiasReader for RhymeBiasReader {
    fn read(&mut self, id: u32) -> Biased {
        let kind = self.lines.kinds.get(id);
        if matches!(
            kind,
            TokenKind::PoemEnd | TokenKind::HeaderStart | TokenKind::HeaderEnd
        ) {
            self.shared = None;
            self.rhymes_read = 0;
        }
        if self.rhyme_next && kind == TokenKind::Char {
            let groups = &self.rhymes.groups[id as usize];
            self.shared = Some(common_groups(self.shared.as_deref(), groups));
            self.rhymes_read += 1;
        }
        let finals = self.lines.finals_before_rhyme(id);
        self.rhyme_next = finals.is_some();
        let Some(finals) = finals else {
            return Vec::new();
        };
        let mut biased: Biased = finals.iter().map(|&f| (f, REPEATED)).collect();
        let agreed = self.shared.iter().filter(|_| self.rhymes_read >= AGREEING);
        for &group in agreed.flatten() {
            biased.extend(
                self.rhymes.members[group as usize]
                    .iter()
                    .map(|&t| (t, RHYMING)),
            );
        }
        biased
    }
}

/// A [`PoemReader`] that keeps the characters that ended the poem's lines.
pub(super) struct RhymeReader {
    kinds: TokenKinds,
    poem: PoemReader,
    /// The last character read, if the last token was one.
    last: Option<u32>,
    /// The characters before each line end of this poem so far.
    finals: Vec<u32>,
}

impl RhymeReader {
    pub(super) fn new(kinds: &TokenKinds) -> Self {
        RhymeReader {
            kinds: kinds.clone(),
            poem: PoemReader::default(),
            last: None,
            finals: Vec::new(),
        }
    }

    /// Reads the next token: the characters that ended the poem's earlier lines where the next
    /// character ends a line that must rhyme, else `None`.
    pub(super) fn finals_before_rhyme(&mut self, id: u32) -> Option<&[u32]> {
        let kind = self.kinds.get(id);
        match kind {
            TokenKind::PoemEnd | TokenKind::HeaderStart | TokenKind::HeaderEnd => {
                self.finals.clear()
            }
            TokenKind::LineEnd => self.finals.extend(self.last),
            TokenKind::Char => {}
        }
        self.last = (kind == TokenKind::Char).then_some(id);
        self.poem
            .read(kind)
            .next_rhymes()
            .then_some(&self.finals[..])
    }
}

impl SequenceReader for RhymeReader {
    fn read(&mut self, id: u32) -> Shares {
        let finals = self.finals_before_rhyme(id).unwrap_or_default();
        finals.iter().map(|&f| (f as usize, 1.0)).collect()
    }
}

/// The rhymes so far of tokens that are `vocabulary`'s characters, for a model of `vocab_size`
/// tokens.
pub fn reads(vocabulary: &Vocabulary, vocab_size: usize) -> Reads {
    Reads::Sequence(Arc::new(RhymeMemory {
        kinds: TokenKinds::of(vocabulary),
        rows: vocab_size,
    }))
}

/// The rhyme biases for tokens that are `vocabulary`'s characters.
pub fn rhyme_bias(vocabulary: &Vocabulary) -> Reads {
    Reads::Bias(Arc::new(RhymeBias {
        kinds: TokenKinds::of(vocabulary),
        rhymes: Arc::new(Rhymes::of(vocabulary)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_a_rhyme_it_takes_the_rows_of_the_earlier_line_ends() {
        let text = "\n白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";
        let vocabulary = Vocabulary::new(text.chars().zip(0..));
        let Reads::Sequence(input) = reads(&vocabulary, 40) else {
            panic!("a sequence input")
        };
        let mut reader = input.reader();
        let rows: Vec<Shares> = (0..text.chars().count() as u32)
            .map(|id| reader.read(id))
            .collect();
        let id = |c: char| text.chars().position(|x| x == c).unwrap();
        // Before 楼 (at 层, 22): the lines so far ended on 尽, 流 and 目.
        assert_eq!(
            rows[22],
            [(id('尽'), 1.0), (id('流'), 1.0), (id('目'), 1.0)]
        );
        // Before 流 (at 海, 10): 尽 alone; elsewhere nothing.
        assert_eq!(rows[10], [(id('尽'), 1.0)]);
        let taken: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].is_empty()).collect();
        assert_eq!(taken, [10, 22]);
    }

    #[test]
    fn before_a_rhyme_it_biases_the_earlier_line_ends_and_from_the_third_what_rhymes_with_them() {
        let text = "\n国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。\
                    烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。\n";
        let vocabulary = Vocabulary::new(text.chars().zip(0..));
        let Reads::Bias(input) = rhyme_bias(&vocabulary) else {
            panic!("a next-token bias")
        };
        let mut reader = input.reader();
        let biased: Vec<Biased> = (0..text.chars().count() as u32)
            .map(|id| reader.read(id))
            .collect();
        let id = |c: char| text.chars().position(|x| x == c).unwrap() as u32;
        let sorted = |i: usize| {
            let mut entries = biased[i].clone();
            entries.sort_unstable();
            entries
        };
        let entries = |repeated: &str, rhyming: &str| {
            let mut all: Biased = repeated.chars().map(|c| (id(c), REPEATED)).collect();
            all.extend(rhyming.chars().map(|c| (id(c), RHYMING)));
            all.sort_unstable();
            all
        };
        // Before 深 (at 木, 10) and 心 (at 惊, 22): the earlier line ends; one rhyme is no group.
        assert_eq!(sorted(10), entries("在", ""));
        assert_eq!(sorted(22), entries("在深泪", ""));
        // Before 金 (at 万, 34) and 簪 (at 胜, 46): two rhymes agree on 侵, so its characters too.
        assert_eq!(sorted(34), entries("在深泪心月", "深心金簪"));
        assert_eq!(sorted(46), entries("在深泪心月金短", "深心金簪"));
        let taken: Vec<usize> = (0..biased.len())
            .filter(|&i| !biased[i].is_empty())
            .collect();
        assert_eq!(
            taken,
            [10, 22, 34, 46],
            "nowhere else, and a new poem starts afresh"
        );
    }
}
