//! What counts as a regular-form poem: the rules shared by corpus building and loading.

/// The punctuation kept in the corpus; every sentence ends with one of these.
pub const PUNCTUATION: [char; 5] = ['，', '。', '？', '！', '；'];

/// Whether `c` is a CJK unified or compatibility ideograph (the characters a poem may hold).
pub fn is_cjk_ideograph(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF | 0x2A700..=0x323AF)
}

/// The four regular forms: 5- or 7-character quatrains (绝句) and regulated verse (律诗).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// 五言绝句: 4 lines of 5.
    Wujue,
    /// 七言绝句: 4 lines of 7.
    Qijue,
    /// 五言律诗: 8 lines of 5.
    Wulv,
    /// 七言律诗: 8 lines of 7.
    Qilv,
}

impl Form {
    /// Every form.
    pub const ALL: [Form; 4] = [Form::Wujue, Form::Qijue, Form::Wulv, Form::Qilv];

    /// The form's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Form::Wujue => "wujue",
            Form::Qijue => "qijue",
            Form::Wulv => "wulv",
            Form::Qilv => "qilv",
        }
    }

    /// (characters per line, lines).
    pub fn shape(self) -> (usize, usize) {
        match self {
            Form::Wujue => (5, 4),
            Form::Qijue => (7, 4),
            Form::Wulv => (5, 8),
            Form::Qilv => (7, 8),
        }
    }

    /// The form with this shape, if any.
    pub fn from_shape(chars: usize, lines: usize) -> Option<Form> {
        Form::ALL.into_iter().find(|f| f.shape() == (chars, lines))
    }
}

impl std::str::FromStr for Form {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Form::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown form `{s}`: use wujue, qijue, wulv or qilv"))
    }
}

/// Refuses a line break in `text` (a newline, a carriage return or another character that ends a
/// line), which would end the poem there: a poem is one line. `what` names the text in the
/// message (`the prompt`, `--poem`).
pub fn one_line(text: &str, what: &str) -> Result<(), String> {
    let line_break = |c: &char| {
        matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    match text.chars().find(line_break) {
        None => Ok(()),
        Some(c) => Err(format!(
            "{what} holds a line break ({}), which ends a poem: give one poem, on one line",
            crate::data::error::describe_char(c)
        )),
    }
}

/// The form of `poem` if it is regular verse: only ideographs and [`PUNCTUATION`], every sentence
/// ended by a punctuation mark, all sentences of 5 or all of 7 characters, 4 or 8 of them.
pub fn regular_form(poem: &str) -> Option<Form> {
    let mut lengths = Vec::new();
    let mut current = 0;
    for c in poem.chars() {
        if PUNCTUATION.contains(&c) {
            lengths.push(current);
            current = 0;
        } else if is_cjk_ideograph(c) {
            current += 1;
        } else {
            return None;
        }
    }
    if current != 0 || lengths.is_empty() || lengths.iter().any(|&l| l != lengths[0]) {
        return None;
    }
    Form::from_shape(lengths[0], lengths.len())
}
