//! Stage 3, settling: waiting for the replies of requests in flight. A request's own
//! [`Pending`] resolves by itself (the backend settled moved keys and topology changes below
//! it); a lane's requests are answered together. A RESP connection settles its round in request
//! order (each joined request takes the next lane sent: [`super::Pipeline::next_sent`]); the fast
//! path settles out of order, whatever finishes first ([`InFlight`]).

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::lane::{LaneCall, Replies};
use crate::cmd::Pending;
use crate::resp::Reply;

/// Work in flight: one request's reply, or a lane of requests sent together.
pub enum Job<M> {
    One { meta: M, barrier: bool, pending: Pending },
    Lane(LaneCall<M>),
}

/// A job's replies.
pub enum Finished<M> {
    One { meta: M, barrier: bool, reply: Reply },
    Lane(Replies<M>),
}

impl<M> Finished<M> {
    /// Requests it answers.
    pub fn len(&self) -> usize {
        match self {
            Finished::One { .. } => 1,
            Finished::Lane(replies) => replies.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether later requests waited for it (see [`InFlight::push`]).
    pub fn barrier(&self) -> bool {
        matches!(self, Finished::One { barrier: true, .. })
    }

    /// Every request's meta and reply.
    pub fn each(self, mut f: impl FnMut(M, Reply)) {
        match self {
            Finished::One { meta, reply, .. } => f(meta, reply),
            Finished::Lane(replies) => replies.for_each(|(meta, reply)| f(meta, reply)),
        }
    }
}

async fn settle<M>(job: Job<M>) -> Finished<M> {
    match job {
        Job::One { meta, barrier, pending } => {
            Finished::One { meta, barrier, reply: pending.resolve().await }
        }
        Job::Lane(call) => Finished::Lane(call.wait().await),
    }
}

type Settling<M> = std::pin::Pin<Box<dyn std::future::Future<Output = Finished<M>> + Send>>;

/// The requests in flight on a connection that answers out of order, with how many requests
/// they answer and how many of them later requests must not overtake (barriers).
///
/// When the connection ends with some still running (CLIENT KILL, a failed write, the output
/// limit), they are finished in a task of their own and their replies dropped: a command of
/// several dependent steps (a cross-node MSETNX or script, a value sent in pieces) cut off
/// between two steps would leave its write half-applied. (A RESP connection gets the same by
/// resolving a round's commands before it closes.) Each is bounded by the backend deadline.
pub struct InFlight<M: Send + 'static> {
    jobs: FuturesUnordered<Settling<M>>,
    requests: usize,
    barriers: usize,
}

impl<M: Send + 'static> Default for InFlight<M> {
    fn default() -> Self {
        InFlight { jobs: FuturesUnordered::new(), requests: 0, barriers: 0 }
    }
}

impl<M: Send + 'static> InFlight<M> {
    /// Requests in flight (a lane counts its requests).
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Requests in flight that later ones must not overtake.
    pub fn barriers(&self) -> usize {
        self.barriers
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// One request's reply on its way; `barrier`: later requests wait until it is in (it takes
    /// several dependent steps, or is sent in pieces: one could otherwise overtake a step).
    pub fn push(&mut self, meta: M, barrier: bool, pending: Pending) {
        self.requests += 1;
        self.barriers += barrier as usize;
        self.jobs.push(Box::pin(settle(Job::One { meta, barrier, pending })));
    }

    /// A lane sent.
    pub fn push_lane(&mut self, call: LaneCall<M>) {
        self.requests += call.len();
        self.jobs.push(Box::pin(settle(Job::Lane(call))));
    }

    /// The next job to finish (never, while none is in flight).
    pub async fn next(&mut self) -> Finished<M> {
        match self.jobs.next().await {
            Some(done) => self.taken(done),
            None => std::future::pending().await,
        }
    }

    /// A job that has finished already, if any, without waiting.
    pub fn ready(&mut self) -> Option<Finished<M>> {
        use futures_util::FutureExt;
        let done = self.jobs.next().now_or_never()??;
        Some(self.taken(done))
    }

    fn taken(&mut self, done: Finished<M>) -> Finished<M> {
        self.requests -= done.len();
        self.barriers -= done.barrier() as usize;
        done
    }

    /// Gives up on everything in flight (their replies will never be written: the time to
    /// authenticate is up). They still run to their end (see the type's docs).
    pub fn abandon(&mut self) {
        self.finish_detached();
        self.requests = 0;
        self.barriers = 0;
    }

    fn finish_detached(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let mut rest = std::mem::take(&mut self.jobs);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { while rest.next().await.is_some() {} });
        }
    }
}

impl<M: Send + 'static> Drop for InFlight<M> {
    fn drop(&mut self) {
        self.finish_detached();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_in_flight_when_the_connection_ends_still_finish() {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let mut in_flight: InFlight<()> = InFlight::default();
        in_flight.push(
            (),
            false,
            Pending::later(async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Reply::OK
            }),
        );
        drop(in_flight);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst), "the dropped request ran to its end");
    }
}
