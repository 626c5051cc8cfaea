//! Verse places (`verse_places = true`): where each position stands in its poem, a sequence input
//! of the GPT (`model::inputs`): SongNet's format and rhyme symbols (Li et al., ACL 2020), read here
//! from the tokens themselves, so that neither the data nor generation needs anything new.
//!
//! After token t (the position that predicts token t + 1) it takes the rows of W
//! (`transformer.wvp.weight`) for
//! - its place in the line: 0 right after a line end or a newline, then 1, 2, … (7 and beyond: 7);
//! - its line's index in the poem: 0, 1, … (7 and beyond: 7);
//! - whether the next character ends a line (its place is the first line's length), and whether
//!   that line must rhyme (an even line: the 2nd, 4th, …)
//!
//! are added to its embedding. A window of text may begin inside a poem: until a line end (for the
//! place) and a newline (for the line) say where it stands, place and line take their "unknown"
//! rows and no flag is set.

use super::vocabulary::{TokenKind, TokenKinds, Vocabulary};
use crate::model::inputs::{Reads, SequenceInput, SequenceReader, Shares};
use std::sync::Arc;

/// Places 0..=7, then "unknown".
const PLACE_ROWS: usize = 9;
/// Lines 0..=7, then "unknown"; they follow the places.
const LINE_ROWS: usize = 9;
/// The row of "the next character ends a line".
const ENDS_LINE: usize = PLACE_ROWS + LINE_ROWS;
/// The row of "… and that line must rhyme".
const RHYMES: usize = ENDS_LINE + 1;
/// Rows of W.
pub const ROWS: usize = RHYMES + 1;

/// Where a reader stands in a poem, token by token.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoemReader {
    /// Characters since the last line end; unknown before the first line end or newline.
    place: Option<usize>,
    /// Line ends since the last newline; unknown before the first newline.
    line: Option<usize>,
    /// The length of the poem's first line, once it has ended.
    first_line: Option<usize>,
}

/// The rows of W that one position takes: its place, its line, and the flags that are set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Places {
    rows: [usize; 4],
    len: usize,
}

impl Places {
    /// The rows, in order.
    pub fn rows(&self) -> &[usize] {
        &self.rows[..self.len]
    }

    /// Whether the next character ends a line that must rhyme.
    pub fn next_rhymes(&self) -> bool {
        self.rows().contains(&RHYMES)
    }
}

impl PoemReader {
    /// Reads one token of kind `kind`: the rows of the position that holds it.
    pub fn read(&mut self, kind: TokenKind) -> Places {
        match kind {
            TokenKind::PoemEnd | TokenKind::HeaderEnd => {
                *self = PoemReader {
                    place: Some(0),
                    line: Some(0),
                    first_line: None,
                }
            }
            // Inside a header nothing of the poem is known.
            TokenKind::HeaderStart => *self = PoemReader::default(),
            TokenKind::LineEnd => {
                if self.line == Some(0) {
                    self.first_line = self.place.filter(|&p| p > 0);
                }
                self.place = Some(0);
                self.line = self.line.map(|l| l + 1);
            }
            TokenKind::Char => self.place = self.place.map(|p| p + 1),
        }
        let place = self.place.map_or(PLACE_ROWS - 1, |p| p.min(PLACE_ROWS - 2));
        let line = self.line.map_or(LINE_ROWS - 1, |l| l.min(LINE_ROWS - 2));
        let mut places = Places {
            rows: [place, PLACE_ROWS + line, 0, 0],
            len: 2,
        };
        let ends_line = matches!((self.place, self.first_line), (Some(p), Some(n)) if p + 1 == n);
        if ends_line {
            places.rows[2] = ENDS_LINE;
            places.len = 3;
            if self.line.is_some_and(|l| l % 2 == 1) {
                places.rows[3] = RHYMES;
                places.len = 4;
            }
        }
        places
    }
}

/// What each token is to a poem, by token id: what a reader needs.
struct VersePlaces {
    kinds: TokenKinds,
}

impl SequenceInput for VersePlaces {
    fn rows(&self) -> usize {
        ROWS
    }

    fn reader(&self) -> Box<dyn SequenceReader> {
        Box::new(PlaceReader {
            kinds: self.kinds.clone(),
            poem: PoemReader::default(),
        })
    }
}

/// A [`PoemReader`] on token ids.
struct PlaceReader {
    kinds: TokenKinds,
    poem: PoemReader,
}

impl SequenceReader for PlaceReader {
    fn read(&mut self, id: u32) -> Shares {
        let places = self.poem.read(self.kinds.get(id));
        places.rows().iter().map(|&row| (row, 1.0)).collect()
    }
}

/// The places of tokens that are `vocabulary`'s characters.
pub fn reads(vocabulary: &Vocabulary) -> Reads {
    Reads::Sequence(Arc::new(VersePlaces {
        kinds: TokenKinds::of(vocabulary),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of each position of `text` read from a fresh reader.
    fn rows_of(text: &str) -> Vec<Vec<usize>> {
        let vocabulary = Vocabulary::new(text.chars().zip(0..));
        let mut reader = PoemReader::default();
        (0..text.chars().count())
            .map(|id| reader.read(vocabulary.kind(id)).rows().to_vec())
            .collect()
    }

    #[test]
    fn a_reader_knows_the_place_the_line_and_the_rhyming_slots() {
        let (unknown_place, unknown_line) = (PLACE_ROWS - 1, PLACE_ROWS + LINE_ROWS - 1);
        let line = |l: usize| PLACE_ROWS + l;
        let rows = rows_of("日，\n白日依山尽，黄河入海流。欲穷千里目，更上一层楼。");
        // Inside a poem it did not see begin: nothing known, then the place after a line end.
        assert_eq!(rows[0], [unknown_place, unknown_line]);
        assert_eq!(rows[1], [0, unknown_line]);
        // A newline: place 0 of line 0; the first line's length is not known yet.
        assert_eq!(rows[2], [0, line(0)]);
        assert_eq!(rows[3], [1, line(0)]); // 白
        assert_eq!(rows[7], [5, line(0)]); // 尽
        assert_eq!(rows[8], [0, line(1)]); // ，
                                           // 河 is at place 2; the next (入) is not the last; 海 (4) is followed by 流, the last of
                                           // an even line: ends a line and rhymes.
        assert_eq!(rows[10], [2, line(1)]);
        assert_eq!(rows[12], [4, line(1), ENDS_LINE, RHYMES]);
        assert_eq!(rows[13], [5, line(1)]); // 流
        assert_eq!(rows[14], [0, line(2)]); // 。
        assert_eq!(rows[18], [4, line(2), ENDS_LINE]); // 里: 目 ends an odd line
        assert_eq!(rows[24], [4, line(3), ENDS_LINE, RHYMES]); // 层: 楼 rhymes
                                                               // A header (【poet·title】) is not part of the poem: the poem begins after its 】.
        let titled = rows_of("\n【李白·静夜思】床前明月光，疑是地上霜。");
        let unknown = [unknown_place, unknown_line];
        assert!(titled[1..8].iter().all(|r| r[..] == unknown), "{titled:?}");
        assert_eq!(titled[8], [0, line(0)]); // 】: the poem's start
        assert_eq!(titled[9], [1, line(0)]); // 床
        assert_eq!(titled[14], [0, line(1)]); // ，
        assert_eq!(titled[18], [4, line(1), ENDS_LINE, RHYMES]); // 上: 霜 ends an even line
                                                                 // Places and lines past 7 keep their last row.
        let long = rows_of("\n一二三四五六七八九，");
        assert_eq!(long[9], [7, line(0)]);
        assert_eq!(long[10], [0, line(1)]);
    }
}
