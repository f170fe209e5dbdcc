//! Placeholder.
pub struct HashMap;
