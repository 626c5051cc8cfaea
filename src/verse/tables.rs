//! The tone and rhyme tables shipped in `data/` (`tones.tsv`, `rhymes.tsv`; built by
//! `prepare_data`, sources in data/README.md), compiled into the binary.

use std::collections::HashMap;
use std::sync::OnceLock;

/// A character's tone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// 平: level.
    Ping,
    /// 仄: oblique.
    Ze,
    /// Two readings, one of each: fits either place.
    Both,
}

/// Every character's tone and 平声 rhyme groups.
pub struct Tables {
    tones: HashMap<char, Tone>,
    /// Indices into `group_names`.
    rhymes: HashMap<char, Vec<u16>>,
    group_names: Vec<String>,
}

impl Tables {
    /// The tables shipped in `data/`.
    pub fn shipped() -> &'static Tables {
        static TABLES: OnceLock<Tables> = OnceLock::new();
        TABLES.get_or_init(|| {
            Tables::parse(
                include_str!("../../data/tones.tsv"),
                include_str!("../../data/rhymes.tsv"),
            )
            .expect("the shipped tables parse (tests/verse.rs checks them)")
        })
    }

    /// Tables from the text of `tones.tsv` (character, class 平/仄/两, counts) and `rhymes.tsv`
    /// (character, comma-separated group names); lines starting with # are comments.
    pub fn parse(tones: &str, rhymes: &str) -> Result<Tables, String> {
        let mut table = Tables {
            tones: HashMap::new(),
            rhymes: HashMap::new(),
            group_names: Vec::new(),
        };
        for (i, line) in tones.lines().enumerate() {
            let Some((c, fields)) =
                data_line(line).map_err(|e| format!("tones line {}: {e}", i + 1))?
            else {
                continue;
            };
            let tone = match fields.first().copied() {
                Some("平") => Tone::Ping,
                Some("仄") => Tone::Ze,
                Some("两") => Tone::Both,
                _ => {
                    return Err(format!(
                        "tones line {}: the class must be 平, 仄 or 两",
                        i + 1
                    ))
                }
            };
            table.tones.insert(c, tone);
        }
        for (i, line) in rhymes.lines().enumerate() {
            let Some((c, fields)) =
                data_line(line).map_err(|e| format!("rhymes line {}: {e}", i + 1))?
            else {
                continue;
            };
            let Some(groups) = fields.first() else {
                return Err(format!("rhymes line {}: no group", i + 1));
            };
            let indices = groups
                .split(',')
                .map(|name| table.group_index(name))
                .collect();
            table.rhymes.insert(c, indices);
        }
        Ok(table)
    }

    /// The index of the group named `name`, added if new.
    fn group_index(&mut self, name: &str) -> u16 {
        match self.group_names.iter().position(|n| n == name) {
            Some(i) => i as u16,
            None => {
                self.group_names.push(name.to_string());
                (self.group_names.len() - 1) as u16
            }
        }
    }

    /// The tone of `c`, if the table knows it.
    pub fn tone(&self, c: char) -> Option<Tone> {
        self.tones.get(&c).copied()
    }

    /// The 平声 rhyme groups of `c` (none for a character of no 平声 group).
    pub fn rhyme_groups(&self, c: char) -> &[u16] {
        self.rhymes.get(&c).map_or(&[], Vec::as_slice)
    }

    /// The number of rhyme groups.
    pub fn group_count(&self) -> usize {
        self.group_names.len()
    }

    /// The name of group `g` (e.g. 下平一先).
    pub fn group_name(&self, g: u16) -> &str {
        &self.group_names[g as usize]
    }

    /// The groups every one of `chars` belongs to.
    pub fn shared_groups(&self, chars: &[char]) -> Vec<u16> {
        chars
            .iter()
            .fold(None, |open: Option<Vec<u16>>, &c| {
                Some(common_groups(open.as_deref(), self.rhyme_groups(c)))
            })
            .unwrap_or_default()
    }
}

/// The groups in both `open` (every group when `None`: nothing chosen yet) and `groups`.
pub fn common_groups(open: Option<&[u16]>, groups: &[u16]) -> Vec<u16> {
    groups
        .iter()
        .copied()
        .filter(|g| open.is_none_or(|o| o.contains(g)))
        .collect()
}

/// A data line's character and its other fields; `None` for comments and blank lines.
pub(crate) fn data_line(line: &str) -> Result<Option<(char, Vec<&str>)>, String> {
    if line.starts_with('#') || line.is_empty() {
        return Ok(None);
    }
    let mut fields = line.split('\t');
    let mut chars = fields.next().unwrap_or_default().chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(Some((c, fields.collect()))),
        _ => Err("expected one character, a tab, then the data".into()),
    }
}
