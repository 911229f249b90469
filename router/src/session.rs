//! Per-connection client state: protocol version, authentication, and the connection's
//! [`ClientHandle`] (identity, name, last command: what CLIENT LIST shows of it).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::clients::ClientHandle;
use crate::pubsub::{LeaveOnDrop, Subscriber};
use crate::resp::Protocol;

#[derive(Debug)]
pub struct Session {
    pub id: u64,
    /// Read for every reply; [`Session::set_protocol`] keeps the handle's copy in step.
    protocol: Protocol,
    pub authenticated: bool,
    /// The ACL user this connection acts as (`None`: the `default` user).
    pub user: Option<Arc<crate::acl::UserCell>>,
    /// What other connections see of this one (CLIENT LIST, CLIENT KILL).
    pub client: Arc<ClientHandle>,
    /// Peer address as CLIENT INFO shows it (`ip:port`, or `path:0` on a Unix socket).
    pub peer: String,
    pub last_command: Instant,
    /// The stats slot of the command being dispatched (`None`: not a known command).
    pub last_command_slot: Option<usize>,
    /// The open transaction (after MULTI).
    pub multi: Option<Multi>,
    /// Keys this connection WATCHes.
    pub watched: WatchList,
    /// An HTTP connection's session (its requests run in it one by one, each as its own user).
    pub http: bool,
    /// Pub/sub: set at the first (P|S)SUBSCRIBE; dropping it unsubscribes everything.
    pub subscriber: Option<LeaveOnDrop>,
    /// The node this client's last PUBLISH went to (see `cmd/pubsub.rs`).
    pub last_publish_node: Option<u32>,
    /// READONLY: read-only commands may be served by replicas.
    pub readonly: bool,
    /// The topology version routed by when this connection last ran a command that may write
    /// (`None`: never): WAIT counts no replica if a shard's primary changed since.
    pub wrote_at: Option<u64>,
    /// CLIENT TRACKING ON: its options (the table entry goes with it).
    pub tracking: Option<Tracked>,
    /// CLIENT CACHING YES|NO, for the next command only.
    pub caching: Option<bool>,
    /// CLIENT REPLY: whether replies are written.
    pub reply: ReplyMode,
    /// CLIENT NO-TOUCH ON (Redis 7.2): this client's commands, TOUCH excepted, leave the LRU
    /// clocks and LFU counters of the keys they read as they were.
    pub no_touch: bool,
    /// The command being run leaves access times alone (`no_touch`, and it is not TOUCH): its
    /// ops carry `Op.no_touch`. Set by `cmd::prepare`.
    pub skip_touch: bool,
}

/// CLIENT REPLY ON|OFF|SKIP: OFF silences every reply until ON; SKIP the one command after it.
/// Pushed messages (pub/sub, invalidations) are written either way, as in Redis.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReplyMode {
    pub off: bool,
    /// Set by SKIP: the next command is silenced.
    pub skip_next: bool,
    skip: bool,
}

impl ReplyMode {
    /// Whether the reply of the command just taken up is written; then moves on to the next
    /// command (Redis's `resetClient`: the command after a SKIP is the silenced one).
    pub fn take(&mut self) -> bool {
        let written = !(self.off || self.skip);
        self.skip = std::mem::take(&mut self.skip_next);
        written
    }
}

/// A client's CLIENT TRACKING state; dropping it (OFF, RESET, disconnect) leaves the table.
#[derive(Debug)]
pub struct Tracked {
    pub options: crate::pubsub::tracking::Options,
    pub hub: Arc<crate::pubsub::Hub>,
    pub id: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.hub.tracking.disable(self.id);
        if self.options.bcast {
            // The nodes need not send this client's prefixes any more (not waited for).
            drop(self.hub.want_tracking(true));
        }
    }
}

impl Session {
    /// Whether this command's reads are tracked (CLIENT TRACKING default mode, with OPTIN /
    /// OPTOUT as CLIENT CACHING said for this command).
    pub fn tracks_reads(&self) -> bool {
        match &self.tracking {
            Some(t) if !t.options.bcast => {
                if t.options.optin {
                    self.caching == Some(true)
                } else if t.options.optout {
                    self.caching != Some(false)
                } else {
                    true
                }
            }
            _ => false,
        }
    }
}

impl Session {
    /// A new connection; `authenticated` is true when no password is configured.
    pub fn new(client: Arc<ClientHandle>, authenticated: bool) -> Session {
        Session {
            id: client.id,
            protocol: Protocol::Resp2,
            authenticated,
            user: None,
            peer: client.peer.clone(),
            last_command: client.created,
            client,
            last_command_slot: None,
            multi: None,
            watched: WatchList::default(),
            http: false,
            subscriber: None,
            last_publish_node: None,
            readonly: false,
            wrote_at: None,
            tracking: None,
            caching: None,
            reply: ReplyMode::default(),
            no_touch: false,
            skip_touch: false,
        }
    }

    /// A session of its own for an HTTP request (listed nowhere).
    pub fn http(id: u64, peer: String) -> Session {
        let mut session = Session::new(Arc::new(ClientHandle::new(id, peer, "http".into(), false)), true);
        session.http = true;
        session
    }

    /// Acts as `user` from now on (`None`: the default user); CLIENT LIST shows it.
    pub fn set_user(&mut self, user: Option<Arc<crate::acl::UserCell>>) {
        // An HTTP connection's session is set to its request's user on every request: the
        // handle's names are locked only when the user changes.
        let same = match (&self.user, &user) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if !same {
            self.client.update_names(|n| n.user = user.as_ref().map(|u| u.name.clone()));
        }
        self.user = user;
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub fn set_protocol(&mut self, protocol: Protocol) {
        self.protocol = protocol;
        self.client.set_protocol(protocol);
    }

    pub fn name(&self) -> Option<Bytes> {
        self.client.name()
    }

    pub fn set_name(&self, name: Option<Bytes>) {
        self.client.update_names(|n| n.name = name);
    }

    /// A command arrived now.
    pub fn start_command(&mut self) {
        self.start_command_at(Instant::now());
    }

    /// [`start_command`](Self::start_command) with a time already read (requests taken up
    /// together).
    pub fn start_command_at(&mut self, at: Instant) {
        self.last_command = at;
        self.client.touch(at);
    }

    /// Whether the client is subscribed to anything (Redis's pub/sub mode, which restricts a
    /// RESP2 connection's commands).
    pub fn subscribed(&self) -> bool {
        // The counts the hub keeps on the client handle (CLIENT LIST's sub/psub/ssub).
        self.client.is_pubsub()
    }

    /// The pub/sub messages waiting for this client, if it ever subscribed.
    pub fn pushes(&self) -> Option<&std::sync::Arc<Subscriber>> {
        self.subscriber.as_ref().map(|s| &s.sub)
    }

    /// RESET: back to a fresh connection's state (keeping identity, the client library's
    /// name and version, and NO-EVICT, as Redis 7.0 does; NO-TOUCH goes, as in 7.2): out of
    /// pub/sub too. The caller releases
    /// the watches.
    pub fn reset(&mut self, password_required: bool) {
        self.subscriber = None;
        self.tracking = None;
        self.caching = None;
        self.reply = ReplyMode::default();
        // As Redis 7.2 does; NO-EVICT stays (7.0's RESET keeps it).
        self.no_touch = false;
        self.skip_touch = false;
        self.client.set_no_touch(false);
        self.client.set_tracking(0, -1);
        self.multi = None;
        self.client.set_multi(None);
        self.set_protocol(Protocol::Resp2);
        self.authenticated = !password_required;
        self.set_user(None);
        self.set_name(None);
    }
}

/// A transaction being queued (after MULTI).
#[derive(Debug, Default)]
pub struct Multi {
    /// Each queued command's stats slot (`crate::cmd::slots`) and arguments.
    pub(crate) queued: Vec<(usize, Vec<Bytes>)>,
    /// Bytes of the queued arguments (bounded like a query buffer).
    pub(crate) bytes: usize,
    /// A command was refused while queueing: EXEC answers EXECABORT.
    pub dirty: bool,
    /// Set when a queued command's node refused it after it was queued (OOM: memory full, found
    /// by the room check `transaction::queue` makes): as `dirty`, but set from that check's reply.
    pub(crate) refused: Arc<std::sync::atomic::AtomicBool>,
    /// The queued bytes held against the process-wide request buffer budget (set on the first
    /// queued command): many clients, each within its own limit, cannot together queue more.
    pub(crate) charge: Option<crate::state::Charge>,
}

/// The keys a connection watches, with the versions their nodes answered. Shared with WATCH's
/// reply (which records the versions when they arrive) and with the connection (which releases
/// them when it closes).
#[derive(Debug, Clone, Default)]
pub struct WatchList(Arc<parking_lot::Mutex<Vec<(Bytes, u64)>>>);

impl WatchList {
    pub fn take(&self) -> Vec<(Bytes, u64)> {
        std::mem::take(&mut *self.0.lock())
    }

    /// The list, to record versions as they arrive.
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<(Bytes, u64)>> {
        self.0.lock()
    }
}
