//! The sound embedding (`sound = true`): each character's 平声 rhyme groups and its tone, from the
//! tables shipped in `data/` (`rhymes.tsv`, `tones.tsv`), as learned rows added to its own
//! embedding, so that the characters of one group share what the group has learned:
//!
//! ```text
//! E'[v] = E[v] + Σ_{g ∈ groups(v)} W[g] / |groups(v)| + W[G + tone(v)]      (V, C)
//! ```
//!
//! W (`transformer.wse.weight`, G groups + 3 tones (平, 仄, 两) rows of C) starts at zero, so that
//! a new model is the same as without sounds. With a tied output layer E' is the output layer
//! too: one row W[g] then raises or lowers every character of group g at once, which is what a
//! rhyme asks for. A character the tables do not know (punctuation among them) adds nothing.

use crate::model::vocabulary::Vocabulary;
use crate::verse::tables::{Tables, Tone};
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// The tones' rows follow the groups' rows, in this order.
const TONES: [Tone; 3] = [Tone::Ping, Tone::Ze, Tone::Both];

/// The rows of W: the shipped tables' rhyme groups, then the three tones.
pub fn rows() -> usize {
    Tables::shipped().group_count() + TONES.len()
}

/// Each token's rows of W with their shares, by token id.
fn shares_of(vocabulary: &Vocabulary) -> Vec<Vec<(usize, f32)>> {
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

/// The learned rows W and the fixed map from them to the tokens.
#[derive(Clone)]
pub struct SoundEmbedding {
    /// W (rows, C).
    pub(crate) weight: Tensor,
    /// Per token id, the rows of W added to its embedding and the share of each.
    shares: Vec<Vec<(usize, f32)>>,
    /// The map as a matrix A (V, rows), for the candle graph.
    map: Tensor,
}

impl SoundEmbedding {
    /// W of `rows()` × `n_embd`, zero at first, for a model of `vocab_size` tokens whose
    /// characters are `vocabulary`'s.
    pub fn new(
        vb: VarBuilder,
        vocabulary: &Vocabulary,
        vocab_size: usize,
        n_embd: usize,
    ) -> Result<Self> {
        let shares = shares_of(vocabulary);
        let rows = rows();
        let weight = vb.get_with_hints((rows, n_embd), "weight", Init::Const(0.0))?;
        let mut map = vec![0f32; vocab_size * rows]; // (V, rows)
        for (v, shares) in shares.iter().enumerate() {
            for &(row, share) in shares {
                map[v * rows + row] = share;
            }
        }
        let map = Tensor::from_vec(map, (vocab_size, rows), weight.device())?;
        Ok(SoundEmbedding {
            weight,
            shares,
            map,
        })
    }

    /// The token table E' = E + A W (V, C) for the embedding E (V, C), as a graph of
    /// differentiable ops.
    pub fn table(&self, wte: &Tensor) -> Result<Tensor> {
        wte + self.map.matmul(&self.weight)? // (V, C)
    }

    /// [`Self::table`] on slices, for the CPU engine: E' (V × C) from E (V × C) and W.
    pub fn table_values(&self, wte: &[f32], weight: &[f32], c: usize) -> Vec<f32> {
        let mut table = wte.to_vec(); // (V, C)
        for (row, shares) in table.chunks_mut(c).zip(&self.shares) {
            for &(r, share) in shares {
                let w = &weight[r * c..(r + 1) * c]; // (C)
                row.iter_mut().zip(w).for_each(|(e, w)| *e += share * w);
            }
        }
        table
    }

    /// The gradient of W (rows × C) from the table's d_table (V × C): Aᵀ d_table, summed in token
    /// order.
    pub fn gradient(&self, d_table: &[f32], c: usize) -> Vec<f32> {
        let mut d_weight = vec![0f32; rows() * c]; // (rows, C)
        for (d_row, shares) in d_table.chunks(c).zip(&self.shares) {
            for &(r, share) in shares {
                let d_w = &mut d_weight[r * c..(r + 1) * c]; // (C)
                d_w.iter_mut().zip(d_row).for_each(|(d, g)| *d += share * g);
            }
        }
        d_weight
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
