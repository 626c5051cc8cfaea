//! The sound embedding (`sound = true`): each character's 平声 rhyme groups and its tone, from the
//! tables shipped in `data/` (`rhymes.tsv`, `tones.tsv`), a token input of the GPT
//! (`model::inputs`): learned rows added to its own embedding, so that the characters of one group
//! share what the group has learned:
//!
//! ```text
//! E'[v] = E[v] + Σ_{g ∈ groups(v)} W[g] / |groups(v)| + W[G + tone(v)]      (V, C)
//! ```
//!
//! W (`transformer.wse.weight`) has G groups + 3 tones (平, 仄, 两) rows of C. With a tied output
//! layer E' is the output layer too: one row W[g] then raises or lowers every character of group g
//! at once, which is what a rhyme asks for. A character the tables do not know (punctuation among them) adds nothing.

use super::vocabulary::Vocabulary;
use crate::model::inputs::{Reads, Shares};
use crate::verse::tables::{Tables, Tone};

/// The tones' rows follow the groups' rows, in this order.
const TONES: [Tone; 3] = [Tone::Ping, Tone::Ze, Tone::Both];

/// The rows of W: the shipped tables' rhyme groups, then the three tones.
pub fn rows() -> usize {
    Tables::shipped().group_count() + TONES.len()
}

/// Each token's rows of W with their shares, by token id.
fn shares_of(vocabulary: &Vocabulary) -> Vec<Shares> {
    let tables = Tables::shipped();
    let groups = tables.group_count();
    let sound = |c: char| {
        let rhymes = tables.rhyme_groups(c);
        let share = 1.0 / rhymes.len().max(1) as f32;
        let mut shares: Vec<(usize, f32)> = rhymes.iter().map(|&g| (g as usize, share)).collect();
        if let Some(tone) = tables.tone(c) {
            let row = TONES.iter().position(|&t| t == tone).expect("every tone");
            shares.push((groups + row, 1.0));
        }
        shares
    };
    (0..vocabulary.len())
        .map(|id| vocabulary.char(id).map(sound).unwrap_or_default())
        .collect()
}

/// The sounds of tokens that are `vocabulary`'s characters.
pub fn reads(vocabulary: &Vocabulary) -> Reads {
    Reads::Token {
        shares: shares_of(vocabulary),
        rows: rows(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_shares_its_groups_rows_and_has_its_tones() {
        let shares = shares_of(&Vocabulary::new("东同还日，".chars().zip(1..)));
        let tables = Tables::shipped();
        let group = |name: &str| {
            (0..tables.group_count())
                .find(|&g| tables.group_name(g as u16) == name)
                .expect("a group of the table")
        };
        let (dong, xian, shan) = (group("上平一东"), group("下平一先"), group("上平十五删"));
        let (ping, ze) = (tables.group_count(), tables.group_count() + 1);
        assert_eq!(shares.len(), 6);
        assert_eq!(shares[0], []); // an id the characters do not name
        assert_eq!(shares[1], [(dong, 1.0), (ping, 1.0)]);
        assert_eq!(shares[2], shares[1]);
        assert_eq!(shares[3], [(shan, 0.5), (xian, 0.5), (ping, 1.0)]);
        assert_eq!(shares[4], [(ze, 1.0)]);
        assert_eq!(shares[5], []);
    }
}
