//! Regulated verse (近体诗): what makes a 五绝, 七绝, 五律 or 七律 more than its shape. Each
//! character's tone (平 level, 仄 oblique) and 平水韵 rhyme groups ([`tables`]), the forms' tonal
//! templates ([`templates()`]), and a scorer for any poem: its best template, the share of its tones
//! that fit, whether its rhyme positions share a group, and how much of it is copied from the
//! training text ([`score`]); a poem laid out line by line with those marks ([`marks`]). Song ci
//! (宋词) and the 词谱 of their tunes learned from the corpus ([`tunes`]), with their tones and
//! rhymes ([`tune_meters`]) by the 词林正韵 ([`cilin`]), and a ci read as its tune asks ([`ci_score`]). What the GPT is told of
//! verse beyond its characters: its [`inputs`].

pub mod ci_score;
pub mod cilin;
pub mod inputs;
pub mod marks;
pub mod score;
pub mod tables;
pub mod templates;
pub mod tune_meters;
pub mod tunes;

pub use marks::{mark_poem, MarkedPoem};
pub use score::{score_poem, Novelty, Summary, VerseScore};
pub use tables::{Tables, Tone};
pub use templates::{templates, Slot, Template};
pub use tunes::{TunePattern, Tunes};
