//! The rhymes of the Song ci: each character's 部 of the 词林正韵 with the rhyme's tone class
//! (`data/cilin.tsv`, built by `prepare_data`, compiled into the binary).

use super::tables::data_line;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A ci rhyme's tone class: 平, 上去 (上 and 去 rhyme together) or 入.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum RhymeClass {
    Ping,
    ShangQu,
    Ru,
}

impl RhymeClass {
    /// Every class, in the table's order.
    pub const ALL: [RhymeClass; 3] = [RhymeClass::Ping, RhymeClass::ShangQu, RhymeClass::Ru];

    /// The class's name in the tables: 平, 上去 or 入.
    pub fn name(self) -> &'static str {
        match self {
            RhymeClass::Ping => "平",
            RhymeClass::ShangQu => "上去",
            RhymeClass::Ru => "入",
        }
    }

    /// The class named `name`.
    pub fn parse(name: &str) -> Option<RhymeClass> {
        RhymeClass::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// A 部 of the 词林正韵 (1 to 19) in one tone class: what a ci's rhymes share.
pub type Bu = (u8, RhymeClass);

/// Every character's 部.
pub struct Cilin {
    bu: HashMap<char, Vec<Bu>>,
}

impl Cilin {
    /// The table shipped in `data/`.
    pub fn shipped() -> &'static Cilin {
        static CILIN: OnceLock<Cilin> = OnceLock::new();
        CILIN.get_or_init(|| {
            Cilin::parse(include_str!("../../data/cilin.tsv"))
                .expect("the shipped cilin.tsv parses (tests/tune_meters.rs checks it)")
        })
    }

    /// The table from the text of `cilin.tsv`: `字<TAB>1平,3上去` per line, # for comments.
    pub fn parse(text: &str) -> Result<Cilin, String> {
        let mut bu = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let what = || format!("cilin line {}: {line:?}", i + 1);
            let Some((c, fields)) = data_line(line).map_err(|e| format!("{}: {e}", what()))? else {
                continue;
            };
            let [list] = fields[..] else {
                return Err(format!("{}: one field after the tab, the 部", what()));
            };
            let parsed = list
                .split(',')
                .map(|entry| {
                    let digits: String = entry.chars().take_while(char::is_ascii_digit).collect();
                    let class = RhymeClass::parse(&entry[digits.len()..]);
                    match (digits.parse::<u8>(), class) {
                        (Ok(n @ 1..=19), Some(class)) => Ok((n, class)),
                        _ => Err(format!(
                            "{}: {entry} is not a 部 (1-19) and a class",
                            what()
                        )),
                    }
                })
                .collect::<Result<Vec<Bu>, String>>()?;
            bu.insert(c, parsed);
        }
        Ok(Cilin { bu })
    }

    /// The 部 of `c` (empty for a character the table lacks).
    pub fn bu(&self, c: char) -> &[Bu] {
        self.bu.get(&c).map_or(&[], Vec::as_slice)
    }

    /// The numbers of the 部 `c` has in one of `classes`, each once.
    pub fn numbers_in(&self, c: char, classes: &[RhymeClass]) -> Vec<u8> {
        let mut numbers: Vec<u8> = self
            .bu(c)
            .iter()
            .filter(|b| classes.contains(&b.1))
            .map(|b| b.0)
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
    }
}
