//! What a model learned from a poem's header (`【poet·title】`): the likelihood of each poem's
//! characters given its own header, against given the header of another poem (the one half the
//! list away), and given its own poet with that other poem's title. The header's characters are
//! read, never counted, so the three figures weigh the same characters; their differences are
//! what the poet and the title tell the model (`score --val --corpus data/titled.txt
//! --checkpoint RUN --headers`).

use crate::data::header::{header, split_header, SEPARATOR};
use crate::data::tokenizer::NEWLINE;
use crate::data::CharTokenizer;
use crate::model::Gpt;
use crate::sample::mean_nll_after;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// Poets listed by [`HeaderInformation`]: the most frequent.
pub const POETS_LISTED: usize = 10;

/// The mean negative log-likelihood per character of `line`'s poem and its ending newline under
/// `model`, given the newline that opens it and its header (if it has one), which are not
/// counted.
pub fn poem_nll(model: &Gpt, tokenizer: &CharTokenizer, line: &str) -> Result<f64> {
    let newline = tokenizer
        .id(NEWLINE)
        .context("the run's tokenizer has no newline token")?;
    let (opening, poem) = match split_header(line) {
        Some((inside, poem)) => (header(&[inside]), poem),
        None => (String::new(), line),
    };
    let given = [vec![newline], tokenizer.encode(&opening)?].concat();
    let ids = [given.clone(), tokenizer.encode(poem)?, vec![newline]].concat();
    Ok(mean_nll_after(model, &ids, given.len())?)
}

/// Mean negative log-likelihoods per character (averaged over poems) of a set of poems under
/// three headers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HeaderMeans {
    pub poems: usize,
    /// Given each poem's own header.
    pub own: f64,
    /// Given another poem's header.
    pub other: f64,
    /// Given its own poet with another poem's title.
    pub own_poet: f64,
}

impl HeaderMeans {
    fn of(rows: &[[f64; 3]]) -> HeaderMeans {
        let mean = |k: usize| rows.iter().map(|r| r[k]).sum::<f64>() / rows.len().max(1) as f64;
        HeaderMeans {
            poems: rows.len(),
            own: mean(0),
            other: mean(1),
            own_poet: mean(2),
        }
    }

    /// Nats per character that the true header saves over another poem's: what the model
    /// learned from a poet and a title.
    pub fn information(&self) -> f64 {
        self.other - self.own
    }

    /// Of that, what the poet alone saves (own poet, another title, against another header).
    pub fn from_poet(&self) -> f64 {
        self.other - self.own_poet
    }

    /// What the title saves once the poet is known.
    pub fn from_title(&self) -> f64 {
        self.own_poet - self.own
    }

    /// One line: the three means and the differences.
    pub fn describe(&self) -> String {
        format!(
            "{} poems: {:.4} own header, {:.4} another's, {:.4} own poet with another's title; the header saves {:.4} nats per character (poet {:.4}, title {:.4})",
            self.poems, self.own, self.other, self.own_poet, self.information(), self.from_poet(), self.from_title()
        )
    }
}

/// What a model learned from headers, over all the poems and per poet.
#[derive(Debug, Clone, Serialize)]
pub struct HeaderInformation {
    pub all: HeaderMeans,
    /// The [`POETS_LISTED`] poets with the most poems among those weighed, most first.
    pub poets: Vec<(String, HeaderMeans)>,
}

/// The header information of `lines` (each `【poet·title】poem`; at least two) under `model`.
pub fn header_information(
    model: &Gpt,
    tokenizer: &CharTokenizer,
    lines: &[String],
) -> Result<HeaderInformation> {
    let parsed: Vec<(&str, &str, &str)> = lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let (inside, poem) = split_header(line)
                .with_context(|| format!("poem {} has no header 【poet·title】", i + 1))?;
            let (poet, title) = inside
                .split_once(SEPARATOR)
                .with_context(|| format!("poem {}'s header {inside} is not poet·title", i + 1))?;
            Ok((poet, title, poem))
        })
        .collect::<Result<_>>()?;
    if parsed.len() < 2 {
        bail!("the header's information needs at least two poems, to give each another's header");
    }
    let n = parsed.len();
    let mut rows = Vec::with_capacity(n);
    for (i, &(poet, title, poem)) in parsed.iter().enumerate() {
        let (other_poet, other_title, _) = parsed[(i + n / 2) % n];
        let nll = |p: &str, t: &str| poem_nll(model, tokenizer, &(header(&[p, t]) + poem));
        rows.push([
            nll(poet, title)?,
            nll(other_poet, other_title)?,
            nll(poet, other_title)?,
        ]);
    }
    let mut by_poet: BTreeMap<&str, Vec<[f64; 3]>> = BTreeMap::new();
    for (&(poet, _, _), row) in parsed.iter().zip(&rows) {
        by_poet.entry(poet).or_default().push(*row);
    }
    let mut poets: Vec<(String, HeaderMeans)> = by_poet
        .into_iter()
        .map(|(poet, rows)| (poet.to_string(), HeaderMeans::of(&rows)))
        .collect();
    poets.sort_by(|a, b| b.1.poems.cmp(&a.1.poems).then_with(|| a.0.cmp(&b.0)));
    poets.truncate(POETS_LISTED);
    Ok(HeaderInformation {
        all: HeaderMeans::of(&rows),
        poets,
    })
}
