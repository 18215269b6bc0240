//! The wire format between the uipc daemon (`uipc serve`) and its clients (the preload
//! library, `uipc` subcommands).
//!
//! A connection is a Unix stream socket. Each message is a frame: a u32 little-endian length
//! (at most [`MAX_FRAME`]) and a payload whose first byte is the message's tag, followed by
//! its fields in order: integers little-endian, byte strings and lists as a u32 count then the
//! items, options as a 0/1 byte then the value. Encoding is hand-written ([`codec`]) so that
//! decoding is bounds-checked everywhere: any malformed, truncated, oversized or trailing
//! input is a [`DecodeError`], never a panic (a property test feeds random bytes to both
//! decoders).
//!
//! Senders that must not allocate (the preload library, whose calls may come from a signal
//! handler) encode into fixed buffers (`codec::Writer::fixed`, `Request::encode_into`, the
//! `request::put_*` forms for requests with data), read replies with
//! `client::exchange` into their own space and decode them with [`ResponseView`], which
//! borrows a message's text and GETALL's values from the frame.
//!
//! A session starts with [`Request::Hello`] carrying [`VERSION`] (and the lock area, if any,
//! the client wants with it: [`HelloArea`]); the daemon answers [`Response::Hello`] (the
//! caller's pid as it numbers it, the area's memfd) or an error and closes if the versions
//! differ. A client may send its first request right behind its Hello, before that answer
//! (`client::send_hello`, `client::read_greeting`): the answers come in order. Then every
//! request gets exactly one response, in order, except [`Request::Cancel`], which asks the
//! daemon to end the blocking call in progress and gets none. Every client frame carries
//! SCM_CREDENTIALS, so the daemon judges each call by the caller's current ids
//! ([`transport`]).

pub mod client;
pub mod codec;
pub mod exchange;
pub mod locks;
pub mod procfs;
pub mod reader;
pub mod request;
pub mod response;
mod sender;
mod tag;
pub mod transport;
mod wire;

pub use codec::DecodeError;
pub use locks::{hint_slot, map_hints, LockLine, LockRequest, LockResponse, HINT_SLOTS};
pub use procfs::{ProcFile, ProcRequest};
pub use request::{HelloArea, Request, SemArg, MAX_SOPS, MAX_TEXT};
pub use response::{Response, ResponseView};

/// The protocol version; bumped on any incompatible change of a message. 2: file locks
/// ([`Request::Lock`], [`Response::Lock`]); 3: Hello asks for a lock area and its reply
/// carries the caller's pid ([`HelloArea`]).
pub const VERSION: u32 = 3;

/// The largest payload a frame may carry.
pub const MAX_FRAME: u32 = 16 << 20;
