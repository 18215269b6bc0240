//! A step of a call that may wait: its answer, or the call still waiting. The parked calls
//! (`parked.rs`) and the file-lock calls (`lockserve.rs`) both step this way.

use uipc_proto::Response;

/// A step of a call that may wait: answered, or still waiting as `P`.
pub enum Outcome<P> {
    /// The call finished with this response.
    Answer(Response),
    /// The call waits.
    Waiting(P),
}

impl<P> Outcome<P> {
    /// The waiting call turned into another type.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> Outcome<Q> {
        match self {
            Outcome::Answer(r) => Outcome::Answer(r),
            Outcome::Waiting(p) => Outcome::Waiting(f(p)),
        }
    }
}
