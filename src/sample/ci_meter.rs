//! Meter control for a ci (`--tune X --meter`): its tune's tones and rhymes (the 词谱 with tones,
//! [`crate::verse::tune_meters`]), as a mask over token ids.
//!
//! At a sure position, a character whose tone fits it (a character of both tones fits either; one
//! of unknown tone only a free position). At the end of a rhyming sentence, a character with a 部
//! of the 词林正韵 in the tune's rhyme class that every earlier rhyme of the ci shares, and that
//! ended no earlier rhyme (no 重韵). So the first rhyme chooses the 部.

use super::meter::MeterRule;
use crate::verse::cilin::Cilin;
use crate::verse::tune_meters::TuneMeter;
use crate::verse::{Slot, Tables, Tone};

/// The meter of one tune over a vocabulary.
pub struct CiMeter {
    /// Per sentence: its positions' tones and whether its end rhymes.
    sentences: Vec<(Vec<Slot>, bool)>,
    /// Each token's tone (`None`: not in the table, or not a character).
    tones: Vec<Option<Tone>>,
    /// Each token's 部 in the tune's rhyme class.
    bu: Vec<Vec<u8>>,
}

impl CiMeter {
    /// The meter of `meter`'s tune for a vocabulary whose token i is the character `names[i]`.
    pub fn new(meter: &TuneMeter, names: &[char], (tables, cilin): (&Tables, &Cilin)) -> Self {
        CiMeter {
            sentences: meter
                .sentences
                .iter()
                .map(|(slots, _, rhymes)| (slots.clone(), *rhymes))
                .collect(),
            tones: names.iter().map(|&c| tables.tone(c)).collect(),
            bu: names
                .iter()
                .map(|&c| cilin.bu_in(c, meter.class).collect())
                .collect(),
        }
    }

    /// The tokens that end the rhyming sentences of `poem` (the ids after its header, marks
    /// included) before `sentence`.
    fn rhymes_before(&self, poem: &[u32], sentence: usize) -> Vec<u32> {
        let mut start = 0;
        let mut finals = Vec::new();
        for (slots, rhymes) in &self.sentences[..sentence] {
            if *rhymes {
                finals.push(poem[start + slots.len() - 1]);
            }
            start += slots.len() + 1;
        }
        finals
    }

    /// The 部 every one of `finals` has (`None` before the first rhyme).
    fn shared(&self, finals: &[u32]) -> Option<Vec<u8>> {
        let mut finals = finals.iter();
        let mut shared = self.bu[*finals.next()? as usize].clone();
        for &f in finals {
            shared.retain(|b| self.bu[f as usize].contains(b));
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
        let (slots, rhymes) = &self.sentences[sentence];
        if !slots[col].admits(self.tones[next as usize]) {
            return false;
        }
        if !(*rhymes && col + 1 == slots.len()) {
            return true;
        }
        let bu = &self.bu[next as usize];
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
        let shared = self.shared(&finals);
        (0..self.tones.len() as u32)
            .map(|id| self.admits(position, (&finals, &shared), id))
            .collect()
    }

    fn allows(&self, poem: &[u32], position: (usize, usize), next: u32) -> bool {
        let finals = self.rhymes_before(poem, position.0);
        self.admits(position, (&finals, &self.shared(&finals)), next)
    }

    fn expected(&self, _poem: &[u32], (sentence, col): (usize, usize)) -> String {
        let (slots, rhymes) = &self.sentences[sentence];
        let tone = match slots[col] {
            Slot::Ping => "a 平 (level-tone) character",
            Slot::Ze => "a 仄 (oblique-tone) character",
            Slot::Free => "a character",
        };
        match *rhymes && col + 1 == slots.len() {
            true => format!(
                "{tone} that rhymes (词林正韵) with the ci's earlier rhymes and repeats none"
            ),
            false => tone.to_string(),
        }
    }
}
