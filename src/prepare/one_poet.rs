//! A corpus of one poet's poems, cut from data/titled.txt (`prepare_data --poet 李白`), for
//! fine-tuning a run on the whole corpus: its lines are arranged so that the poems a run on the
//! file holds out (every [`VAL_EVERY`]-th) are exactly the poet's poems that a run on the whole
//! corpus held out, so that no held-out poem was seen by the run it is fine-tuned from.

use crate::data::corpus::VAL_EVERY;
use crate::data::header::{split_header, Poets, SEPARATOR};
use crate::data::poem::{regular_form, Form};

/// One poet's poems, as lines of a corpus file.
#[derive(Debug)]
pub struct PoetCorpus {
    /// The poems in the order of data/titled.txt, each held-out one at a held-out place.
    pub lines: Vec<String>,
    /// Of those, the poems a run on the file holds out.
    pub held_out: usize,
    /// The poet's poems left out to keep the held-out places right (a last few).
    pub left_out: usize,
}

/// The poems of `poet` of the `forms` asked among the lines of `titled` (`【poet·title】poem`, the
/// whole corpus in its order), with their headers or without; an error naming the nearest poets
/// for an unknown one.
pub fn poet_corpus(
    titled: &str,
    poet: &str,
    headers: bool,
    forms: &[Form],
) -> Result<PoetCorpus, String> {
    let (mut trained, mut held): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut poets_poems = 0;
    for (i, line) in titled.lines().enumerate() {
        let Some((inside, poem)) = split_header(line) else {
            continue;
        };
        if inside.split_once(SEPARATOR).map(|(p, _)| p) != Some(poet) {
            continue;
        }
        poets_poems += 1;
        if !regular_form(poem).is_some_and(|form| forms.contains(&form)) {
            continue;
        }
        let kept = match headers {
            true => line.to_string(),
            false => poem.to_string(),
        };
        match i % VAL_EVERY == VAL_EVERY - 1 {
            true => held.push(kept),
            false => trained.push(kept),
        }
    }
    if poets_poems == 0 {
        Poets::of_corpus(titled).check(poet)?;
    }
    let total = trained.len() + held.len();
    let (mut trained, mut held) = (trained.into_iter(), held.into_iter());
    let mut lines = Vec::new();
    loop {
        let next = match lines.len() % VAL_EVERY == VAL_EVERY - 1 {
            true => held.next(),
            false => trained.next(),
        };
        match next {
            Some(line) => lines.push(line),
            None => break,
        }
    }
    Ok(PoetCorpus {
        held_out: lines.len() / VAL_EVERY,
        left_out: total - lines.len(),
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wujue whose first character tells it from the others, its first line ending in `end`.
    fn poem(i: usize, end: &str) -> String {
        let first = char::from_u32(0x4E00 + i as u32).unwrap();
        format!("{first}日{end}，黄河入海流。欲穷千里目，更上一层楼。")
    }

    /// Line `i` of a titled corpus: a wujue of `poet`.
    fn line(i: usize, poet: &str) -> String {
        format!("【{poet}·题{i}】{}\n", poem(i, "依山尽"))
    }

    #[test]
    fn only_the_forms_asked_are_kept() {
        // 李白's lines 0, 2, 4, …: the even ones a wujue, the others a qijue.
        let titled: String = (0..80)
            .map(|i| match i % 4 {
                0 => line(i, "李白"),
                2 => format!(
                    "【李白·题{i}】{}\n",
                    poem(i, "依山尽处").replace("黄河", "黄河水")
                ),
                _ => line(i, "杜甫"),
            })
            .collect();
        let wujue = poet_corpus(&titled, "李白", false, &[Form::Wujue]).unwrap();
        assert!(wujue
            .lines
            .iter()
            .all(|l| regular_form(l) == Some(Form::Wujue)));
        assert_eq!(wujue.lines.len() + wujue.left_out, 20);
        let none = poet_corpus(&titled, "李白", false, &[Form::Qilv]).unwrap();
        assert!(
            none.lines.is_empty(),
            "a poet without poems of the form asked: none"
        );
    }

    #[test]
    fn the_poets_held_out_poems_stay_held_out() {
        // 60 poems alternating between two poets: 李白's are lines 0, 2, 4, …; the whole corpus
        // holds out lines 19, 39, 59, all of 杜甫.
        let titled: String = (0..60).map(|i| line(i, ["李白", "杜甫"][i % 2])).collect();
        let all = Form::ALL;
        let li = poet_corpus(&titled, "李白", false, &all).unwrap();
        assert_eq!(li.held_out, 0);
        assert_eq!(
            li.lines.len(),
            19,
            "stops where a held-out poem would be needed"
        );
        assert_eq!(li.left_out, 11);
        assert_eq!(li.lines[0], poem(0, "依山尽"));
        let du = poet_corpus(&titled, "杜甫", true, &all).unwrap();
        let held: Vec<&str> = du
            .lines
            .iter()
            .skip(VAL_EVERY - 1)
            .step_by(VAL_EVERY)
            .map(String::as_str)
            .collect();
        assert_eq!(
            held,
            [line(19, "杜甫").trim_end()],
            "line 19 of the corpus, held out by both"
        );
        assert_eq!((du.held_out, du.lines.len(), du.left_out), (1, 28, 2));
        let err = poet_corpus(&titled, "李太白", false, &all).unwrap_err();
        assert!(err.contains("the nearest: 李白"), "{err}");
    }
}
