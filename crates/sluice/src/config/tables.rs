//! `[tables.NAME]`: the section's type is the tables module's own
//! (`tables::config`), so the tables depend on no configuration module;
//! named here too, where the other sections are.

pub use crate::tables::config::*;
