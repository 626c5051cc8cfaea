//! Meter control for a ci (`--tune X --meter`): its tune's tones and rhymes (the 词谱 with tones,
//! [`crate::verse::tune_meters`]), as a mask over token ids.
//!
//! At a sure position, a character whose tone fits it (a character of both tones fits either; one
//! of unknown tone only a free position). At the end of a rhyming sentence, a character with a 部
//! of the 词林正韵 in its rhyme segment's classes that every earlier rhyme of the segment shares,
//! and that ended no earlier rhyme of the ci (no 重韵). So each segment's first rhyme chooses its
//! 部: a 菩萨蛮 changes rhyme where its tune does (换韵), a 西江月 keeps one 部 in 平 and 仄.

use super::meter::MeterRule;
use crate::verse::cilin::Cilin;
use crate::verse::tune_meters::TuneMeter;
use crate::verse::{Slot, Tables, Tone};

/// The meter of one tune over a vocabulary.
pub struct CiMeter {
    /// Per sentence: its positions' tones and the rhyme segment its end rhymes in.
    sentences: Vec<(Vec<Slot>, Option<usize>)>,
    /// Each token's tone (`None`: not in the table, or not a character).
    tones: Vec<Option<Tone>>,
    /// Per rhyme segment, each token's 部 (their numbers) in the segment's classes.
    bu: Vec<Vec<Vec<u8>>>,
}

/// Before a rhyme: the ci's earlier rhymes, and the 部 its segment's earlier rhymes all share
/// (`None` before the segment's first).
type Before = (Vec<u32>, Option<Vec<u8>>);

impl CiMeter {
    /// The meter of `meter`'s tune for a vocabulary whose token i is the character `names[i]`.
    pub fn new(meter: &TuneMeter, names: &[char], (tables, cilin): (&Tables, &Cilin)) -> Self {
        CiMeter {
            sentences: meter
                .sentences
                .iter()
                .map(|(slots, _, segment)| (slots.clone(), *segment))
                .collect(),
            tones: names.iter().map(|&c| tables.tone(c)).collect(),
            bu: meter
                .segments
                .iter()
                .map(|classes| {
                    names
                        .iter()
                        .map(|&c| cilin.numbers_in(c, classes))
                        .collect()
                })
                .collect(),
        }
    }

    /// What a rhyme at `sentence` of `poem` (the ids after its header, marks included) must
    /// keep to: the ci's earlier rhymes, and the 部 the earlier rhymes of its segment share.
    fn before(&self, poem: &[u32], sentence: usize) -> Before {
        let segment = self.sentences[sentence].1;
        let mut start = 0;
        let (mut all, mut shared): (Vec<u32>, Option<Vec<u8>>) = (Vec::new(), None);
        for (slots, s) in &self.sentences[..sentence] {
            let last = poem[start + slots.len() - 1];
            start += slots.len() + 1;
            let Some(s) = s else { continue };
            all.push(last);
            if Some(*s) == segment {
                let bu = &self.bu[*s][last as usize];
                shared = Some(match shared {
                    None => bu.clone(),
                    Some(mut kept) => {
                        kept.retain(|b| bu.contains(b));
                        kept
                    }
                });
            }
        }
        (all, shared)
    }

    /// Whether `next` fits (sentence, col), after the rhymes `before`.
    fn admits(&self, (sentence, col): (usize, usize), (all, shared): &Before, next: u32) -> bool {
        let (slots, segment) = &self.sentences[sentence];
        if !slots[col].admits(self.tones[next as usize]) {
            return false;
        }
        let Some(segment) = segment.filter(|_| col + 1 == slots.len()) else {
            return true;
        };
        let bu = &self.bu[segment][next as usize];
        !all.contains(&next)
            && match shared {
                None => !bu.is_empty(),
                Some(shared) => bu.iter().any(|b| shared.contains(b)),
            }
    }
}

impl MeterRule for CiMeter {
    fn allowed(&self, poem: &[u32], position: (usize, usize)) -> Vec<bool> {
        let before = self.before(poem, position.0);
        (0..self.tones.len() as u32)
            .map(|id| self.admits(position, &before, id))
            .collect()
    }

    fn allows(&self, poem: &[u32], position: (usize, usize), next: u32) -> bool {
        self.admits(position, &self.before(poem, position.0), next)
    }

    fn expected(&self, _poem: &[u32], (sentence, col): (usize, usize)) -> String {
        let (slots, segment) = &self.sentences[sentence];
        let tone = match slots[col] {
            Slot::Ping => "a 平 (level-tone) character",
            Slot::Ze => "a 仄 (oblique-tone) character",
            Slot::Free => "a character",
        };
        match segment.is_some() && col + 1 == slots.len() {
            true => format!(
                "{tone} that rhymes (词林正韵) with the earlier rhymes of its segment and repeats no rhyme of the ci"
            ),
            false => tone.to_string(),
        }
    }
}
