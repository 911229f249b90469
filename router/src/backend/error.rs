//! Why a call to a node produced no reply, typed until the edge: the RESP encoder writes it as
//! an error line (`crate::resp::reply::failure_text`), the HTTP API as a 503.

/// Why a call to a node produced no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("node {node} ({addr}) is unavailable: {reason}")]
    Unavailable { node: u32, addr: String, reason: String },
    /// The link failed after the op was sent: the node may have run it. Only an op that changes
    /// nothing is sent again (to the slot's new owner); a write gets this error, never a second
    /// application.
    #[error("node {node} ({addr}) is unavailable, with the request in flight (it may have run): {reason}")]
    InFlight { node: u32, addr: String, reason: String },
    #[error("node {node} ({addr}) did not answer within {ms} ms")]
    Timeout { node: u32, addr: String, ms: u64 },
    #[error("node {node} ({addr}) is overloaded: too many queued requests")]
    Overloaded { node: u32, addr: String },
    #[error("unexpected reply from node: {0}")]
    BadReply(String),
    #[error("the cluster topology is changing; try again")]
    Unsettled,
    #[error("this command needs a second step after its first reply, which cannot run inside MULTI/EXEC")]
    NotTransactional,
    /// A unit's keys stayed in a slot moving between nodes until the deadline (nothing of it ran).
    #[error("a key of the transaction is in a slot moving between nodes; try again")]
    TryAgain,
    /// A write over keys of several nodes (LMOVE, RENAME, ... across nodes) found its keys
    /// changed by another writer at every attempt, or a transaction over several nodes waited
    /// behind this router's others for its nodes, until the deadline (nothing of it ran).
    #[error(
        "other clients kept the keys or nodes of this command over several nodes busy until its deadline; try again"
    )]
    Contended,
    /// A transaction over several nodes whose commit a node did not answer: the nodes finish it
    /// among themselves (all of it or none, `backend::spread`), but its replies are lost.
    #[error(
        "the transaction's outcome is unknown to this router: node {node} ({addr}) did not answer its commit ({reason}); the nodes apply all of it or none"
    )]
    Undecided { node: u32, addr: String, reason: String },
}

/// Why an atomic call did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtomicError {
    /// The keys do not live on one node whose slots are settled (some may be moving).
    #[error("the keys do not share one node")]
    Spread,
    #[error(transparent)]
    Backend(#[from] BackendError),
}
