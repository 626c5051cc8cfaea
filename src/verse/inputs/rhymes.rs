//! Rhymes so far (`rhyme_memory = true`): at the position whose next character ends a line that
//! must rhyme (as [`super::places`] reads it), the rows of W (`transformer.wrm.weight`, one per
//! token) of the characters that ended the poem's earlier lines, a sequence input of the GPT
//! (`model::inputs`). With W's row of a character learned against its output row, the model can
//! learn not to rhyme on a character it has used (重韵), which the free samples do in about a
//! third of their regular poems (docs/experiments.md, section 11).

use super::places::PoemReader;
use super::vocabulary::{TokenKind, TokenKinds, Vocabulary};
use crate::model::inputs::{Reads, SequenceInput, SequenceReader, Shares};
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
        Box::new(RhymeReader {
            kinds: self.kinds.clone(),
            poem: PoemReader::default(),
            last: None,
            finals: Vec::new(),
        })
    }
}

/// A [`PoemReader`] that keeps the characters that ended the poem's lines.
struct RhymeReader {
    kinds: TokenKinds,
    poem: PoemReader,
    /// The last character read, if the last token was one.
    last: Option<u32>,
    /// The characters before each line end of this poem so far.
    finals: Vec<u32>,
}

impl SequenceReader for RhymeReader {
    fn read(&mut self, id: u32) -> Shares {
        let kind = self.kinds.get(id);
        match kind {
            TokenKind::PoemEnd | TokenKind::HeaderStart | TokenKind::HeaderEnd => {
                self.finals.clear()
            }
            TokenKind::LineEnd => self.finals.extend(self.last),
            TokenKind::Char => {}
        }
        self.last = (kind == TokenKind::Char).then_some(id);
        match self.poem.read(kind).next_rhymes() {
            true => self.finals.iter().map(|&f| (f as usize, 1.0)).collect(),
            false => Vec::new(),
        }
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
}
