//! A poem's header: what the poem is, in brackets at the start of its line, written before it in a
//! corpus: a ci's tune `【浣溪沙】`, a Tang poem's poet and title `【李白·静夜思】` (data/titled.txt).
//! The header is not part of the poem: forms, meter and scores read the poem after its `】`.
//! What a poem may be asked for by (`sample --poet 李白 --title 秋夜`): a [`HeaderRequest`].

use std::collections::HashMap;

/// The bracket that opens a header.
pub const OPEN: char = '【';
/// The bracket that closes it: the poem begins after it.
pub const CLOSE: char = '】';
/// Between a header's fields: `【poet·title】`.
pub const SEPARATOR: char = '·';
/// The marks of a header: what no poem holds, nor a prompt or an acrostic for one.
pub const MARKS: [char; 3] = [OPEN, SEPARATOR, CLOSE];
/// The most characters of a header's field that the model writes itself (the corpus's longest
/// poet has 10; a title left to the model is cut there).
pub const MAX_FIELD_CHARS: usize = 24;

/// The header of `line` (between its brackets) and the poem after it, where the line begins with
/// a header: `【李白·静夜思】床前…` gives (`李白·静夜思`, `床前…`).
pub fn split_header(line: &str) -> Option<(&str, &str)> {
    let (inside, poem) = line.strip_prefix(OPEN)?.split_once(CLOSE)?;
    (!inside.is_empty()).then_some((inside, poem))
}

/// The poem of `line`: after its header, if it has one.
pub fn without_header(line: &str) -> &str {
    split_header(line).map_or(line, |(_, poem)| poem)
}

/// The header with these `fields`: `【李白·静夜思】`.
pub fn header(fields: &[&str]) -> String {
    format!("{OPEN}{}{CLOSE}", fields.join(&SEPARATOR.to_string()))
}

/// What a poem is asked for by: its poet and its title, each given or left to the model. The
/// header's fields are (poet, title), as data/titled.txt writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRequest {
    pub poet: Option<String>,
    pub title: Option<String>,
}

impl HeaderRequest {
    /// The header's fields in order, each given (`Some`) or left to the model.
    pub fn fields(&self) -> [Option<&str>; 2] {
        [self.poet.as_deref(), self.title.as_deref()]
    }

    /// A one-line error for a field that cannot stand in a header: empty, a line break, a
    /// bracket or the separator (which would end it or split it), or longer than a field may be.
    pub fn check(&self) -> Result<(), String> {
        for (flag, field) in [("--poet", &self.poet), ("--title", &self.title)] {
            let Some(text) = field else { continue };
            let what = format!("{flag} \"{}\"", super::error::printable(text));
            if text.trim().is_empty() {
                return Err(format!(
                    "{what} is empty: give a name, or leave the flag out"
                ));
            }
            crate::data::poem::one_line(text, &what)?;
            if let Some(c) = text.chars().find(|c| MARKS.contains(c)) {
                return Err(format!(
                    "{what} holds {c}, which marks the header itself (【poet·title】): leave it out"
                ));
            }
            let chars = text.chars().count();
            if chars > MAX_FIELD_CHARS {
                return Err(format!(
                    "{what} has {chars} characters, more than {MAX_FIELD_CHARS}: shorten it"
                ));
            }
        }
        Ok(())
    }

    /// The header's text up to the first field left to the model: what the program writes
    /// (`【李白·`, `【李白·秋夜】`, or `【` when the poet is left to the model).
    pub fn given_prefix(&self) -> String {
        match self.fields() {
            [Some(poet), Some(title)] => header(&[poet, title]),
            [Some(poet), None] => format!("{OPEN}{poet}{SEPARATOR}"),
            [None, _] => OPEN.to_string(),
        }
    }
}

/// The poets of a corpus of titled poems (lines `【poet·title】poem`), with their poems' counts:
/// to tell a user asking for an unknown poet the nearest names.
pub struct Poets {
    /// (poet, poems), most poems first.
    counts: Vec<(String, usize)>,
}

impl Poets {
    /// The poets of the lines of `corpus` that begin with a header of two fields.
    pub fn of_corpus(corpus: &str) -> Poets {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for line in corpus.lines() {
            if let Some((poet, _title)) =
                split_header(line).and_then(|(h, _)| h.split_once(SEPARATOR))
            {
                *counts.entry(poet).or_default() += 1;
            }
        }
        Poets::sorted(
            counts
                .into_iter()
                .map(|(p, n)| (p.to_string(), n))
                .collect(),
        )
    }

    /// The poets of a list of lines `count<TAB>poet` (the static build's `run/poets.tsv`, counted
    /// from the run's corpus as [`Poets::of_corpus`] counts them); a line of another shape is
    /// skipped.
    pub fn of_counts(text: &str) -> Poets {
        let counts = text.lines().filter_map(|line| {
            let (n, poet) = line.split_once('\t')?;
            Some((poet.to_string(), n.parse().ok()?))
        });
        Poets::sorted(counts.collect())
    }

    /// Poets with these counts, most poems first (then by name).
    fn sorted(mut counts: Vec<(String, usize)>) -> Poets {
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Poets { counts }
    }

    /// The poets of the corpus file at `path`: `None` where it cannot be read or holds no titled
    /// poem (then a poet cannot be checked).
    pub fn of_corpus_file(path: &std::path::Path) -> Option<Poets> {
        let poets = Poets::of_corpus(&std::fs::read_to_string(path).ok()?);
        (!poets.is_empty()).then_some(poets)
    }

    /// (poet, poems), most poems first.
    pub fn counts(&self) -> &[(String, usize)] {
        &self.counts
    }

    /// Whether the corpus has no titled poem.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// `Ok` for a poet of the corpus, else an error naming the nearest poets.
    pub fn check(&self, poet: &str) -> Result<(), String> {
        if self.counts.iter().any(|(p, _)| p == poet) {
            return Ok(());
        }
        if poet.trim().is_empty() {
            return Err("the poet's name is empty: give one, e.g. 李白".into());
        }
        let names = self.counts.iter().map(|(p, _)| p.as_str());
        Err(format!(
            "no poet {} among the {} poets of the corpus; the nearest: {}",
            super::error::printable(poet),
            self.counts.len(),
            nearest_names(names, poet, 5).join(", ")
        ))
    }
}

/// The `n` names of `names` (in order of preference, e.g. most poems first) nearest to `name`:
/// fewest character edits first (a name that holds `name`, such as an alias pair 望江南・忆江南 for
/// 忆江南, counts as one edit), then the earlier in `names`.
pub fn nearest_names<'a>(
    names: impl Iterator<Item = &'a str>,
    name: &str,
    n: usize,
) -> Vec<&'a str> {
    let distance = |candidate: &str| match candidate.contains(name) && !name.is_empty() {
        true => 1,
        false => strsim::levenshtein(candidate, name),
    };
    let mut ranked: Vec<(usize, usize, &str)> = names
        .enumerate()
        .map(|(i, candidate)| (distance(candidate), i, candidate))
        .collect();
    ranked.sort_unstable();
    ranked.into_iter().take(n).map(|(_, _, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_splits_from_its_poem_and_a_line_without_one_is_all_poem() {
        assert_eq!(
            split_header("【李白·静夜思】床前明月光。"),
            Some(("李白·静夜思", "床前明月光。"))
        );
        assert_eq!(without_header("【浣溪沙】一曲新词。"), "一曲新词。");
        assert_eq!(without_header("床前明月光。"), "床前明月光。");
        assert_eq!(
            without_header("【】床前"),
            "【】床前",
            "an empty header is no header"
        );
        assert_eq!(header(&["李白", "静夜思"]), "【李白·静夜思】");
    }

    #[test]
    fn the_program_writes_the_header_up_to_the_first_field_left_to_the_model() {
        let ask = |poet: Option<&str>, title: Option<&str>| HeaderRequest {
            poet: poet.map(String::from),
            title: title.map(String::from),
        };
        assert_eq!(
            ask(Some("李白"), Some("秋夜")).given_prefix(),
            "【李白·秋夜】"
        );
        assert_eq!(ask(Some("李白"), None).given_prefix(), "【李白·");
        assert_eq!(ask(None, Some("秋夜")).given_prefix(), "【");
        assert_eq!(ask(None, None).given_prefix(), "【");
        for (bad, says) in [
            (ask(Some("李\n白"), None), "line break"),
            (ask(None, Some("秋】夜")), "marks the header"),
            (ask(Some("李·白"), None), "marks the header"),
            (ask(None, Some(" ")), "is empty"),
            (ask(None, Some(&"夜".repeat(25))), "more than 24"),
        ] {
            let err = bad.check().unwrap_err();
            assert!(err.contains(says) && !err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn an_unknown_poet_is_told_the_nearest_names() {
        let poets = Poets::of_corpus(
            "【李白·静夜思】床前。\n【李白·秋浦歌】白发。\n【杜甫·春望】国破。\n【浣溪沙】一曲。\n",
        );
        assert_eq!(poets.counts()[0], ("李白".to_string(), 2));
        assert_eq!(poets.counts().len(), 2, "a tune is not a poet");
        assert!(poets.check("杜甫").is_ok());
        let err = poets.check("李太白").unwrap_err();
        assert!(err.contains("the nearest: 李白, 杜甫"), "{err}");
        for empty in ["", "  "] {
            let err = poets.check(empty).unwrap_err();
            assert_eq!(err, "the poet's name is empty: give one, e.g. 李白");
        }
        // As the static build lists them (run/poets.tsv), in any order: the same poets.
        let listed = Poets::of_counts("1\t杜甫\n2\t李白\nnot a line\n");
        assert_eq!(listed.counts(), poets.counts());
    }
}
