//! The ground floor: what is on media, and the codes for what a pool
//! records. Header and geometry (`header`, `layout`), log record encoding
//! (`record`), redo commit groups (`group`), variant / policy / backend codes (`codes`), and `PPtr`, the
//! persistent pointer (an offset). Little-endian,
//! named offsets, checksums verified before anything trusts the bytes.
//! Depends on nothing of rewind but its errors.

mod codes;
mod fingerprint;
// The SSE4.2 `crc32` instruction behind a runtime check of the CPU.
#[allow(unsafe_code)]
pub mod crc;
pub mod group;
pub mod header;
pub mod layout;
pub mod le;
pub mod meta;
// `unsafe impl Pod` and `Zeroable` for `PPtr<T>` (bytemuck's derive cannot
// see through the phantom type).
#[allow(unsafe_code)]
mod pptr;
pub mod record;

pub use codes::{Backend, LogVariant, Policy};
pub use fingerprint::{Pointee, TypeFingerprint, Typed};
pub use pptr::PPtr;
