//! The characters behind a model's token ids, for the inputs that depend on what a token is: its
//! sound ([`super::sound`]) and whether it ends a line or a poem ([`super::places`]).

use crate::data::header::{CLOSE, OPEN};
use crate::data::poem::PUNCTUATION;
use std::sync::Arc;

/// What a token is to a poem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// The newline that ends a poem (and starts the next).
    PoemEnd,
    /// A punctuation mark that ends a line.
    LineEnd,
    /// The `【` that opens a poem's header (`【poet·title】`, `【tune】`): not part of the poem.
    HeaderStart,
    /// The `】` that closes it: the poem begins after it.
    HeaderEnd,
    /// A character of a line (or an id the vocabulary does not name).
    Char,
}

/// The character of each token id.
#[derive(Debug, Clone, PartialEq)]
pub struct Vocabulary {
    chars: Vec<Option<char>>,
}

impl Vocabulary {
    /// The vocabulary of the pairs (character, token id), such as a tokenizer's.
    pub fn new(chars: impl IntoIterator<Item = (char, u32)>) -> Vocabulary {
        let mut by_id = Vec::new();
        for (c, id) in chars {
            let id = id as usize;
            if by_id.len() <= id {
                by_id.resize(id + 1, None);
            }
            by_id[id] = Some(c);
        }
        Vocabulary { chars: by_id }
    }

    /// One more than the largest id it names.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether it names no token.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The character of token `id`, if it names one.
    pub fn char(&self, id: usize) -> Option<char> {
        self.chars.get(id).copied().flatten()
    }

    /// What token `id` is to a poem.
    pub fn kind(&self, id: usize) -> TokenKind {
        match self.char(id) {
            Some('\n') => TokenKind::PoemEnd,
            Some(OPEN) => TokenKind::HeaderStart,
            Some(CLOSE) => TokenKind::HeaderEnd,
            Some(c) if PUNCTUATION.contains(&c) => TokenKind::LineEnd,
            _ => TokenKind::Char,
        }
    }
}

/// What each token of a vocabulary is to a poem, by token id, shared by an input's readers.
#[derive(Debug, Clone)]
pub struct TokenKinds(Arc<[TokenKind]>);

impl TokenKinds {
    /// The kinds of `vocabulary`'s tokens.
    pub fn of(vocabulary: &Vocabulary) -> Self {
        TokenKinds(
            (0..vocabulary.len())
                .map(|id| vocabulary.kind(id))
                .collect(),
        )
    }

    /// What token `id` is (a character for an id the vocabulary does not name).
    pub fn get(&self, id: u32) -> TokenKind {
        self.0.get(id as usize).copied().unwrap_or(TokenKind::Char)
    }
}
