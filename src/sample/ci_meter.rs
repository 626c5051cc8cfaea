//! Meter control for a ci (`--tune X --meter`): its tune's tones and rhymes (the 词谱 with tones,
//! [`crate::verse::tune_meters`]), as a mask over token ids.
//!
//! At a sure position, a character whose tone fits it (a character of both tones fits either; one
//! of unknown tone only a free position). At the end of a rhyming sentence, a character with a 部
//! of the 词林正韵 in its rhyme segment's class that every earlier rhyme of the segment shares,
//! and that ended no earlier rhyme of the segment (no 重韵). So each segment's first rhyme chooses
//! its 部: a 菩萨蛮 changes rhyme where its tune does (换韵).

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
    /// Per rhyme segment, each token's 部 in the segment's class.
    bu: Vec<Vec<Vec<u8>>>,
}

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
                .map(|&class| {
                    names
                        .iter()
                        .map(|&c| cilin.bu_in(c, class).collect())
                        .collect()
                })
                .collect(),
        }
    }

    /// The tokens that end the sentences of `poem` (the ids after its header, marks included)
    /// before `sentence` that rhyme in `sentence`'s segment (none where it does not rhyme).
    fn rhymes_before(&self, poem: &[u32], sentence: usize) -> Vec<u32> {
        let segment = self.sentences[sentence].1;
        let mut start = 0;
        let mut finals = Vec::new();
        for (slots, s) in &self.sentences[..sentence] {
            if segment.is_some() && *s == segment {
                finals.push(poem[start + slots.len() - 1]);
            }
            start += slots.len() + 1;
        }
        finals
    }

    /// The 部 of `segment`'s class every one of `finals` has (`None` before its first rhyme, or
    /// where the sentence does not rhyme).
    fn shared(&self, segment: Option<usize>, finals: &[u32]) -> Option<Vec<u8>> {
        let bu = &self.bu[segment?];
        let mut finals = finals.iter();
        let mut shared = bu[*finals.next()? as usize].clone();
        for &f in finals {
            shared.retain(|b| bu[f as usize].contains(b));
        }
        Some(shared)
    }

    /// Whether `next` fits (sentence, col), after the earlier rhymes `finals` sharing `shared`.
    fn admits(
        &self,
        (sentence, col): (usize, usize),
        (finals, shared): (&[u32], &Option<Vec<u8>>),
        next: u32,
    ) -> bool {
        let (slots, segment) = &self.sentences[sentence];
        if !slots[col].admits(self.tones[next as usize]) {
            return false;
        }
        let Some(segment) = segment.filter(|_| col + 1 == slots.len()) else {
            return true;
        };
        let bu = &self.bu[segment][next as usize];
        !finals.contains(&next)
            && match shared {
                None => !bu.is_empty(),
                Some(shared) => bu.iter().any(|b| shared.contains(b)),
            }
    }
}

impl MeterRule for CiMeter {
    fn allowed(&self, poem: &[u32], position: (usize, usize)) -> Vec<bool> {
        let finals = self.rhymes_before(poem, position.0);
        let shared = self.shared(self.sentences[position.0].1, &finals);
        (0..self.tones.len() as u32)
            .map(|id| self.admits(position, (&finals, &shared), id))
            .collect()
    }

    fn allows(&self, poem: &[u32], position: (usize, usize), next: u32) -> bool {
        let finals = self.rhymes_before(poem, position.0);
        let shared = self.shared(self.sentences[position.0].1, &finals);
        self.admits(position, (&finals, &shared), next)
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
                "{tone} that rhymes (词林正韵) with the earlier rhymes of its segment and repeats none"
            ),
            false => tone.to_string(),
        }
    }
}
