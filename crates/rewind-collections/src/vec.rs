//! Placeholder.
pub struct Vec;
