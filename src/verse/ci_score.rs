//! A ci read as its tune asks: whether it has its tune's pattern (the 词谱, [`super::tunes`]), and
//! where the 词谱 with tones has the tune ([`super::tune_meters`]), how it keeps its tones and
//! rhymes; and a set of ci summed up.

use super::cilin::Cilin;
use super::tables::Tables;
use super::templates::Slot;
use super::tune_meters::{sentences, shared_number, TuneMeters};
use super::tunes::{split_tune, Tunes};

/// How one ci (a line `【tune】text`) fits its tune.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiScore {
    pub tune: String,
    /// Whether the 词谱 has the tune.
    pub known_tune: bool,
    /// Whether the text has one of the tune's forms (its pattern, or a 又一体).
    pub fits: bool,
    /// Which (1: the commonest).
    pub form: Option<usize>,
    /// Where it does not, in words.
    pub misfit: Option<String>,
    /// How it keeps its tune's tones and rhymes, where the 词谱 with tones has them and the ci
    /// its tune's pattern.
    pub meter: Option<CiMeterScore>,
}

impl CiScore {
    /// The score in a line: whether the ci has its tune's pattern, and where not.
    pub fn describe(&self) -> String {
        match (&self.misfit, &self.meter) {
            (None, Some(m)) => format!(
                "{}: has the tune's {}; {}/{} sure tones fit, {}/{} rhyme positions rhyme in their segment's 部{}",
                self.tune,
                self.form_words(),
                m.tones_fitting,
                m.tones_checked,
                m.rhyming,
                m.rhyme_positions,
                if m.repeated_rhyme { ", a rhyme character repeated" } else { "" }
            ),
            (None, None) => format!("{}: has the tune's {}", self.tune, self.form_words()),
            (Some(why), _) if self.known_tune => format!("{}: not the tune's pattern: {why}", self.tune),
            (Some(why), _) => why.clone(),
        }
    }

    /// `pattern`, or `form 2 (又一体)`.
    fn form_words(&self) -> String {
        match self.form {
            Some(n) if n > 1 => format!("form {n} (又一体)"),
            _ => "pattern".into(),
        }
    }
}

/// The score of `line` if it is a ci (begins with a tune's header), by `tunes`: where the text has
/// none of the tune's forms, its difference from the commonest.
pub fn score_ci(line: &str, tunes: &Tunes) -> Option<CiScore> {
    let (tune, text) = split_tune(line)?;
    let (known_tune, form, misfit) = match tunes.get(tune) {
        Ok(known) => match known.form_of(text) {
            Some(form) => (true, Some(form), None),
            None => (true, None, known.pattern.misfit(text)),
        },
        Err(unknown) => (false, None, Some(unknown)),
    };
    let tables = (Tables::shipped(), Cilin::shipped());
    Some(CiScore {
        tune: tune.to_string(),
        known_tune,
        fits: misfit.is_none(),
        form,
        misfit,
        meter: score_ci_meter(line, TuneMeters::shipped(), tables),
    })
}

/// The scores of a set of ci, summed up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiSummary {
    pub ci: usize,
    /// Ci whose tune the 词谱 has.
    pub known_tune: usize,
    /// Ci of one of their tune's forms.
    pub fitting: usize,
    /// Of those, the ci whose tune has learned tones and rhymes.
    pub metered: usize,
    /// Their mean share of sure positions whose tone fits.
    pub mean_tone_fit: f64,
    /// Those whose every rhyme position rhymes in its segment's 部 (of ci with rhyme positions).
    pub rhyming: usize,
    /// Those with rhyme positions.
    pub with_rhymes: usize,
    /// Those that rhyme twice on one character.
    pub repeated_rhyme: usize,
}

impl CiSummary {
    pub fn of(scores: &[CiScore]) -> CiSummary {
        let metered: Vec<&CiMeterScore> = scores.iter().filter_map(|s| s.meter.as_ref()).collect();
        let with_rhymes: Vec<&&CiMeterScore> =
            metered.iter().filter(|m| m.rhyme_positions > 0).collect();
        CiSummary {
            ci: scores.len(),
            known_tune: scores.iter().filter(|s| s.known_tune).count(),
            fitting: scores.iter().filter(|s| s.fits).count(),
            metered: metered.len(),
            // Folded from +0.0: an empty f64 sum is −0.0.
            mean_tone_fit: metered.iter().fold(0.0, |sum, m| sum + m.tone_fit())
                / metered.len().max(1) as f64,
            rhyming: with_rhymes
                .iter()
                .filter(|m| m.rhyming == m.rhyme_positions)
                .count(),
            with_rhymes: with_rhymes.len(),
            repeated_rhyme: metered.iter().filter(|m| m.repeated_rhyme).count(),
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let pct = |n: usize, of: usize| 100.0 * n as f64 / of.max(1) as f64;
        let mut line = format!(
            "{} ci, {} of a tune in the 词谱; {} have their tune's pattern or a 又一体 ({:.0} %)",
            self.ci,
            self.known_tune,
            self.fitting,
            pct(self.fitting, self.ci)
        );
        if self.metered > 0 {
            line += &format!(
                "; of the {} whose tune has learned tones: mean tone fit {:.1} % at its sure positions, {} of {} rhyme at every rhyme position in their segment's 部 ({:.0} %), {} repeat a rhyme character",
                self.metered,
                100.0 * self.mean_tone_fit,
                self.rhyming,
                self.with_rhymes,
                pct(self.rhyming, self.with_rhymes),
                self.repeated_rhyme
            );
        }
        line
    }
}

/// How one ci (a line `【tune】text`) keeps its tune's tones and rhymes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiMeterScore {
    pub tune: String,
    /// Sure positions whose character's tone is known, and of those the ones that fit.
    pub tones_checked: usize,
    pub tones_fitting: usize,
    /// The tune's rhyme positions, and of those the ones whose end shares the 部 (in its
    /// segment's classes) that most of its segment share.
    pub rhyme_positions: usize,
    pub rhyming: usize,
    /// Whether two rhyme positions end on one character.
    pub repeated_rhyme: bool,
}

impl CiMeterScore {
    /// The share of checked positions that fit (0 with none checked).
    pub fn tone_fit(&self) -> f64 {
        self.tones_fitting as f64 / self.tones_checked.max(1) as f64
    }
}

/// How `line` (`【tune】text`) keeps its tune's meter, if the text has one of the tune's forms
/// and that form's meter was learned.
pub fn score_ci_meter(
    line: &str,
    meters: &TuneMeters,
    (tables, cilin): (&Tables, &Cilin),
) -> Option<CiMeterScore> {
    let (tune, text) = split_tune(line)?;
    let meter = meters.for_text(tune, text)?;
    let sentences = sentences(text);
    let (mut checked, mut fitting) = (0, 0);
    for (chars, (slots, _, _)) in sentences.iter().zip(&meter.sentences) {
        for (&c, &slot) in chars.iter().zip(slots) {
            let tone = tables.tone(c);
            if slot == Slot::Free || tone.is_none() {
                continue;
            }
            checked += 1;
            fitting += usize::from(slot.admits(tone));
        }
    }
    // Per rhyme segment: the ends of its sentences.
    let mut segments: Vec<Vec<char>> = vec![Vec::new(); meter.segments.len()];
    for (chars, (_, _, segment)) in sentences.iter().zip(&meter.sentences) {
        if let Some(segment) = segment {
            segments[*segment].push(*chars.last().expect("sentences are not empty"));
        }
    }
    let rhyming = segments
        .iter()
        .zip(&meter.segments)
        .map(|(finals, classes)| shared_number(finals, Some(classes), cilin).map_or(0, |b| b.1))
        .sum();
    let mut seen = segments.concat();
    let rhymes = seen.len();
    seen.sort_unstable();
    seen.dedup();
    let repeated_rhyme = seen.len() < rhymes;
    Some(CiMeterScore {
        tune: tune.to_string(),
        tones_checked: checked,
        tones_fitting: fitting,
        rhyme_positions: segments.iter().map(Vec::len).sum(),
        rhyming,
        repeated_rhyme,
    })
}
