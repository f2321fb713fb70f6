//! What became of a name: the [`Outcome`] of each answer, and the HTTP front-end
//! ([`Endpoint`]) it is counted under.

use httpdns_core::snapshot::AnswerStatus;

/// Resolution front-ends counted by the engine, a label value each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    D,
    Resolve,
    V2,
}

impl Endpoint {
    pub const ALL: [Endpoint; 3] = [Endpoint::D, Endpoint::Resolve, Endpoint::V2];

    pub fn label(self) -> &'static str {
        match self {
            Endpoint::D => "d",
            Endpoint::Resolve => "resolve",
            Endpoint::V2 => "v2",
        }
    }
}

/// Outcome of one name in one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    FailOpen,
    NoRecord,
    NoHealthyNode,
    NotManaged,
    /// Not managed here, answered through the upstream resolver.
    Upstream,
    /// Not managed here; upstreams failed and an expired cached answer was served.
    UpstreamStale,
    /// Not managed here and the upstream resolver failed.
    UpstreamError,
}

impl Outcome {
    /// In order of preference when one name has two families.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Upstream,
        Outcome::FailOpen,
        Outcome::UpstreamStale,
        Outcome::NoRecord,
        Outcome::NoHealthyNode,
        Outcome::NotManaged,
        Outcome::UpstreamError,
    ];

    /// Position in [`Outcome::ALL`]: lower is better.
    pub fn rank(self) -> usize {
        Outcome::ALL.iter().position(|x| *x == self).unwrap_or(usize::MAX)
    }

    /// The label and the `X-Httpdns-Status` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::FailOpen => "fail-open",
            Outcome::NoRecord => "no-record",
            Outcome::NoHealthyNode => "no-healthy-node",
            Outcome::NotManaged => "not-managed",
            Outcome::Upstream => "upstream",
            Outcome::UpstreamStale => "upstream-stale",
            Outcome::UpstreamError => "upstream-error",
        }
    }

    pub fn from_status(s: AnswerStatus) -> Self {
        match s {
            AnswerStatus::Ok => Outcome::Ok,
            AnswerStatus::FailOpen => Outcome::FailOpen,
            AnswerStatus::NoRecord => Outcome::NoRecord,
            AnswerStatus::NoHealthyNode => Outcome::NoHealthyNode,
        }
    }

    /// The better of two outcomes (the order of [`Outcome::ALL`]).
    pub fn better(self, other: Outcome) -> Outcome {
        if self.rank() <= other.rank() {
            self
        } else {
            other
        }
    }
}
