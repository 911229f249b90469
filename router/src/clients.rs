//! The router's connected RESP clients, as CLIENT LIST and CLIENT KILL see them.
//!
//! Each connection owns an [`Arc<ClientHandle>`]: the connection loop writes to it, other
//! connections read it. What changes per command (the command, its time) is kept in atomics, so
//! recording it costs two relaxed stores and no lock; what changes rarely (the name, the library)
//! sits behind a mutex that only CLIENT SETNAME/SETINFO, HELLO, RESET and the readers take.
//! [`Clients`] lists the handles of the open connections (a lock at connect, disconnect, LIST
//! and KILL only). A handle also carries the connection's kill switch: [`ClientHandle::kill`]
//! wakes the connection wherever it waits (reading, or held by CLIENT PAUSE) and it closes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use shoal_wire::proto::{ClientsAnswer, ClientsQuery};

use crate::resp::Protocol;

/// No command yet (`cmd=NULL`, as Redis shows it).
const NO_COMMAND: usize = usize::MAX;

/// The names a client gives itself (CLIENT SETNAME, HELLO SETNAME, CLIENT SETINFO).
#[derive(Debug, Default, Clone)]
pub struct Names {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    /// The ACL user (`None`: `default`).
    pub user: Option<String>,
}

/// One connection as other connections see it.
#[derive(Debug)]
pub struct ClientHandle {
    pub id: u64,
    /// Peer address as CLIENT LIST's `addr` shows it (`ip:port`, or `path:0` on a Unix socket).
    pub peer: String,
    /// The connection's local address (`laddr`): `ip:port`, or the socket path.
    pub local: String,
    /// A Unix socket client (flag `U`).
    pub unix: bool,
    pub created: Instant,
    /// When the last command started, in milliseconds after `created`.
    last_command_ms: AtomicU64,
    /// The last command's stats slot (named by the registry: `crate::cmd::slots`), or
    /// [`NO_COMMAND`].
    last_command: AtomicUsize,
    /// 2 or 3.
    protocol: AtomicU8,
    /// CLIENT NO-EVICT on (flag `e`). Shoal never evicts clients; it is recorded and shown.
    no_evict: AtomicBool,
    no_touch: AtomicBool,
    /// A command of this client waits for CLIENT PAUSE to end (flag `b`, as Redis's postponed
    /// clients show).
    held: AtomicBool,
    /// Commands queued after MULTI (-1: no transaction open), CLIENT LIST's `multi`.
    multi: AtomicI64,
    /// Waiting in a blocking command (BLPOP, ...): flag `b`, and CLIENT UNBLOCK applies.
    blocked: AtomicBool,
    /// CLIENT UNBLOCK's reason for the wait in progress: 1 timeout, 2 error (0: none).
    unblocked: AtomicU8,
    unblock: Notify,
    names: Mutex<Names>,
    killed: AtomicBool,
    kill: Notify,
    /// Subscriptions: channels, patterns, shard channels (`sub=`, `psub=`, `ssub=`; flag `P`).
    subscriptions: [AtomicUsize; 3],
    /// CLIENT TRACKING: 1 on (flag `t`), 2 broken redirect (`R`), 4 BCAST (`B`).
    tracking: AtomicU8,
    /// CLIENT TRACKING REDIRECT's id (`redir=`; -1 without tracking, 0 without redirect).
    redir: AtomicI64,
}

impl ClientHandle {
    pub fn new(id: u64, peer: String, local: String, unix: bool) -> ClientHandle {
        ClientHandle {
            id,
            peer,
            local,
            unix,
            created: Instant::now(),
            last_command_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(NO_COMMAND),
            protocol: AtomicU8::new(2),
            no_evict: AtomicBool::new(false),
            no_touch: AtomicBool::new(false),
            held: AtomicBool::new(false),
            multi: AtomicI64::new(-1),
            blocked: AtomicBool::new(false),
            unblocked: AtomicU8::new(0),
            unblock: Notify::new(),
            names: Mutex::new(Names::default()),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            subscriptions: Default::default(),
            tracking: AtomicU8::new(0),
            redir: AtomicI64::new(-1),
        }
    }

    /// Whether the connection speaks RESP3 now (HELLO 3).
    pub fn is_resp3(&self) -> bool {
        self.protocol.load(Ordering::Relaxed) >= 3
    }

    /// CLIENT TRACKING REDIRECT's target is gone (`R` in the flags until tracking is turned on
    /// again, `broken_redirect` in CLIENT TRACKINGINFO).
    pub fn mark_redirect_broken(&self) {
        self.tracking.fetch_or(2, Ordering::Relaxed);
    }

    pub fn redirect_broken(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) & 2 != 0
    }

    /// CLIENT TRACKING's flags (see the field) and `redir=`.
    pub fn set_tracking(&self, flags: u8, redir: i64) {
        self.tracking.store(flags, Ordering::Relaxed);
        self.redir.store(redir, Ordering::Relaxed);
    }

    /// The client's subscription counts changed (channels, patterns, shard channels).
    pub fn set_subscriptions(&self, channels: usize, patterns: usize, shard: usize) {
        for (slot, n) in self.subscriptions.iter().zip([channels, patterns, shard]) {
            slot.store(n, Ordering::Relaxed);
        }
    }

    /// Subscribed to anything (Redis's pub/sub mode: flag `P`, CLIENT LIST TYPE pubsub).
    pub fn is_pubsub(&self) -> bool {
        self.subscriptions.iter().any(|s| s.load(Ordering::Relaxed) > 0)
    }

    /// A command arrived at `at` (the hot path: one relaxed store).
    pub fn touch(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.created).as_millis() as u64;
        self.last_command_ms.store(ms, Ordering::Relaxed);
    }

    /// The command about to run, by its stats slot (the hot path: one relaxed store).
    pub fn set_command(&self, slot: Option<usize>) {
        self.last_command.store(slot.unwrap_or(NO_COMMAND), Ordering::Relaxed);
    }

    pub fn set_protocol(&self, protocol: Protocol) {
        self.protocol.store(protocol.version() as u8, Ordering::Relaxed);
    }

    pub fn set_no_evict(&self, on: bool) {
        self.no_evict.store(on, Ordering::Relaxed);
    }

    /// CLIENT NO-TOUCH: shown as flag `T`.
    pub fn set_no_touch(&self, on: bool) {
        self.no_touch.store(on, Ordering::Relaxed);
    }

    pub fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Relaxed);
    }

    pub fn names(&self) -> Names {
        self.names.lock().clone()
    }

    pub fn name(&self) -> Option<Bytes> {
        self.names.lock().name.clone()
    }

    pub fn update_names(&self, f: impl FnOnce(&mut Names)) {
        f(&mut self.names.lock());
    }

    /// Closes the connection: it stops at its next wait (or after the round it is in).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        // Every waiter: the connection may wait in more than one place (reading, writing).
        self.kill.notify_waiters();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Completes once [`kill`](Self::kill) has been called (at once if it already was).
    pub async fn killed(&self) {
        let notified = self.kill.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a kill in between is not missed.
        notified.as_mut().enable();
        if !self.is_killed() {
            notified.await;
        }
    }

    /// A blocking command starts (or stops) waiting.
    pub fn set_blocked(&self, blocked: bool) {
        self.unblocked.store(0, Ordering::Relaxed);
        self.blocked.store(blocked, Ordering::Release);
    }

    /// CLIENT UNBLOCK: ends the blocking wait in progress, if any (as a timeout, or with an
    /// error); whether there was one.
    pub fn unblock(&self, error: bool) -> bool {
        if !self.blocked.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.unblocked.store(if error { 2 } else { 1 }, Ordering::Release);
        self.unblock.notify_one();
        true
    }

    /// Completes when CLIENT UNBLOCK ends this client's wait: `true` for the ERROR form.
    pub async fn unblocked(&self) -> bool {
        loop {
            match self.unblocked.load(Ordering::Acquire) {
                0 => self.unblock.notified().await,
                r => return r == 2,
            }
        }
    }

    /// A transaction holding `queued` commands is open (`None`: none is).
    pub fn set_multi(&self, queued: Option<usize>) {
        self.multi.store(queued.map_or(-1, |n| n as i64), Ordering::Relaxed);
    }

    /// Redis's flags field, in its order: `P` subscribed, `x` in MULTI, `b` blocked or held by
    /// a pause, `U` Unix socket, `e` no-evict; `N` for none.
    fn flags(&self) -> String {
        let mut f = String::new();
        if self.is_pubsub() {
            f.push('P');
        }
        if self.multi.load(Ordering::Relaxed) >= 0 {
            f.push('x');
        }
        if self.held.load(Ordering::Relaxed) || self.blocked.load(Ordering::Relaxed) {
            f.push('b');
        }
        let tracking = self.tracking.load(Ordering::Relaxed);
        for (bit, c) in [(1, 't'), (2, 'R'), (4, 'B')] {
            if tracking & bit != 0 {
                f.push(c);
            }
        }
        if self.unix {
            f.push('U');
        }
        if self.no_evict.load(Ordering::Relaxed) {
            f.push('e');
        }
        if self.no_touch.load(Ordering::Relaxed) {
            f.push('T');
        }
        if f.is_empty() {
            f.push('N');
        }
        f
    }

    /// The CLIENT INFO / CLIENT LIST line, with Redis 7.0's fields in Redis's order, then the
    /// two Redis 7.2 added (`lib-name`, `lib-ver`, set by CLIENT SETINFO). Shoal keeps no
    /// per-client buffers or transactions, so those fields are fixed.
    pub fn info_line(&self, name_of: impl Fn(usize) -> Option<&'static str>) -> String {
        let names = self.names();
        fn text(b: &Option<Bytes>) -> std::borrow::Cow<'_, str> {
            b.as_deref().map(String::from_utf8_lossy).unwrap_or_default()
        }
        let now = Instant::now();
        let age = now.saturating_duration_since(self.created);
        let last = std::time::Duration::from_millis(self.last_command_ms.load(Ordering::Relaxed));
        let idle = age.saturating_sub(last);
        let cmd = match self.last_command.load(Ordering::Relaxed) {
            NO_COMMAND => "NULL",
            slot => name_of(slot).unwrap_or("NULL"),
        };
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} multi={} \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r \
             cmd={} user={} redir={} resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.peer,
            self.local,
            text(&names.name),
            age.as_secs(),
            idle.as_secs(),
            self.flags(),
            self.subscriptions[0].load(Ordering::Relaxed),
            self.subscriptions[1].load(Ordering::Relaxed),
            self.subscriptions[2].load(Ordering::Relaxed),
            self.multi.load(Ordering::Relaxed),
            cmd,
            names.user.as_deref().unwrap_or("default"),
            self.redir.load(Ordering::Relaxed),
            self.protocol.load(Ordering::Relaxed),
            text(&names.lib_name),
            text(&names.lib_ver),
        )
    }
}

/// A client type, as CLIENT LIST TYPE and CLIENT KILL TYPE name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientType {
    Normal,
    /// Subscribed to a channel, pattern or shard channel (Redis's pub/sub clients).
    Pubsub,
    /// Master or replica: Shoal has no such clients, so these match none.
    Other,
}

impl ClientType {
    pub fn of(c: &ClientHandle) -> ClientType {
        if c.is_pubsub() { ClientType::Pubsub } else { ClientType::Normal }
    }

    /// A type as a client names it (any case); `None` for a name Redis does not know.
    pub fn parse(name: &[u8]) -> Option<ClientType> {
        match &name.to_ascii_lowercase()[..] {
            b"normal" => Some(ClientType::Normal),
            b"pubsub" => Some(ClientType::Pubsub),
            b"master" | b"replica" | b"slave" => Some(ClientType::Other),
            _ => None,
        }
    }

    /// The name a [`ClientsQuery`] carries (one [`ClientType::parse`] reads back).
    fn wire(self) -> &'static str {
        match self {
            ClientType::Normal => "normal",
            ClientType::Pubsub => "pubsub",
            ClientType::Other => "master",
        }
    }
}

/// Which clients a CLIENT LIST or CLIENT KILL means: every part that is set must match. The
/// router that got the command builds it (from the arguments, checked); the other routers of
/// the cluster get it in a [`ClientsQuery`] and match their clients alike.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Filter {
    /// LIST ID / KILL ID: these ids (LIST lists an id as often as it is given, in that order).
    /// Client ids are unique across the routers of a cluster (see `RouterState`), so an id
    /// matches one client at most, wherever it is connected.
    pub ids: Option<Vec<u64>>,
    pub kind: Option<ClientType>,
    pub addr: Option<Bytes>,
    pub laddr: Option<Bytes>,
    pub user: Option<Bytes>,
    /// SKIPME yes: the caller's id, which never matches.
    pub skip: Option<u64>,
}

impl Filter {
    fn matches(&self, c: &ClientHandle) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(&c.id))
            && self.addr.as_ref().is_none_or(|a| a == c.peer.as_bytes())
            && self.laddr.as_ref().is_none_or(|a| a == c.local.as_bytes())
            && self.kind.is_none_or(|k| k == ClientType::of(c))
            && self
                .user
                .as_ref()
                .is_none_or(|u| c.names().user.as_deref().unwrap_or("default").as_bytes() == u)
            && self.skip != Some(c.id)
    }

    /// The question to the other routers (the asker's own clients are not among theirs, so
    /// SKIPME does not travel).
    pub fn query(&self, kill: bool) -> ClientsQuery {
        let bytes = |b: &Option<Bytes>| b.clone().unwrap_or_default();
        ClientsQuery {
            kill,
            // `ids` set and empty (every id given was out of range) must match nothing: id 0
            // is never given to a client.
            ids: match &self.ids {
                Some(ids) if ids.is_empty() => vec![0],
                Some(ids) => ids.clone(),
                None => Vec::new(),
            },
            kind: self.kind.map(|k| k.wire().to_string()).unwrap_or_default(),
            addr: bytes(&self.addr),
            has_addr: self.addr.is_some(),
            laddr: bytes(&self.laddr),
            has_laddr: self.laddr.is_some(),
            user: self.user.as_deref().map(|u| String::from_utf8_lossy(u).into_owned()).unwrap_or_default(),
            has_user: self.user.is_some(),
            ..ClientsQuery::default()
        }
    }

    /// The filter another router's question means here.
    pub fn of_query(q: &ClientsQuery) -> Filter {
        Filter {
            ids: (!q.ids.is_empty()).then(|| q.ids.clone()),
            // (A name this router does not know matches no client, as `Other`.)
            kind: (!q.kind.is_empty())
                .then(|| ClientType::parse(q.kind.as_bytes()).unwrap_or(ClientType::Other)),
            addr: q.has_addr.then(|| q.addr.clone()),
            laddr: q.has_laddr.then(|| q.laddr.clone()),
            user: q.has_user.then(|| Bytes::from(q.user.clone().into_bytes())),
            skip: None,
        }
    }
}

/// The open RESP connections, by id (the order Redis lists them in: connection order).
#[derive(Debug, Default)]
pub struct Clients {
    open: Mutex<BTreeMap<u64, Arc<ClientHandle>>>,
    /// The names of the commands' stats slots (`cmd=`), given once the command table is known
    /// (the table sits above this module): for answering other routers' CLIENT LIST.
    command_names: std::sync::OnceLock<fn(usize) -> Option<&'static str>>,
}

impl Clients {
    /// Lists `client` until the returned guard is dropped (when the connection ends).
    pub fn register(&self, client: Arc<ClientHandle>) -> Registered<'_> {
        let id = client.id;
        self.open.lock().insert(id, client);
        Registered { clients: self, id }
    }

    /// Connections waiting in a blocking command (INFO's `blocked_clients`).
    pub fn blocked(&self) -> usize {
        self.open.lock().values().filter(|c| c.blocked.load(Ordering::Relaxed)).count()
    }

    /// Every open connection, in id order.
    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        self.open.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientHandle>> {
        self.open.lock().get(&id).cloned()
    }

    /// Names the commands' stats slots (`crate::cmd::name_of`), for [`Clients::answer`].
    pub fn set_command_names(&self, name_of: fn(usize) -> Option<&'static str>) {
        let _ = self.command_names.set(name_of);
    }

    /// CLIENT LIST's lines for the clients `f` matches: in id order, or, with ids, in the order
    /// given (repeats included, as Redis).
    pub fn list(&self, f: &Filter, name_of: impl Fn(usize) -> Option<&'static str>) -> String {
        let chosen: Vec<Arc<ClientHandle>> = match &f.ids {
            Some(ids) => ids.iter().filter_map(|&id| self.get(id)).filter(|c| f.matches(c)).collect(),
            None => self.all().into_iter().filter(|c| f.matches(c)).collect(),
        };
        chosen.iter().map(|c| c.info_line(&name_of)).collect()
    }

    /// CLIENT KILL: closes the clients `f` matches that are not closing already, but `me` (the
    /// caller, closed after its reply): how many matched, and whether `me` did.
    pub fn kill(&self, f: &Filter, me: Option<u64>) -> (u64, bool) {
        let (mut killed, mut close_me) = (0, false);
        for c in self.all() {
            // One killed already is gone for Redis (freed at once), though its connection may
            // not have closed here yet: a second kill does not count it.
            if !f.matches(&c) || c.is_killed() {
                continue;
            }
            if Some(c.id) == me {
                close_me = true;
            } else {
                c.kill();
            }
            killed += 1;
        }
        (killed, close_me)
    }

    /// Another router's CLIENT LIST or CLIENT KILL, about this router's clients.
    pub fn answer(&self, q: &ClientsQuery) -> ClientsAnswer {
        let f = Filter::of_query(q);
        if q.kill {
            let (killed, _) = self.kill(&f, None);
            ClientsAnswer { query: q.id, killed, ..ClientsAnswer::default() }
        } else {
            let name_of = self.command_names.get().copied().unwrap_or(|_| None);
            ClientsAnswer { query: q.id, lines: self.list(&f, name_of).into(), ..ClientsAnswer::default() }
        }
    }
}

/// A connection's place in [`Clients`]; removed when dropped.
#[derive(Debug)]
pub struct Registered<'a> {
    clients: &'a Clients,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.clients.open.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(line: &str) -> Vec<&str> {
        line.trim_end().split(' ').map(|f| f.split_once('=').unwrap().0).collect()
    }

    #[test]
    fn a_filter_means_the_same_on_the_router_it_is_relayed_to() {
        for kind in [ClientType::Normal, ClientType::Pubsub, ClientType::Other] {
            let f = Filter {
                ids: Some(vec![7, 9, 7]),
                kind: Some(kind),
                addr: Some(Bytes::from_static(b"127.0.0.1:5")),
                laddr: Some(Bytes::new()),
                user: Some(Bytes::from_static(b"lu")),
                skip: None,
            };
            assert_eq!(Filter::of_query(&f.query(true)), f);
        }
        assert_eq!(Filter::of_query(&Filter::default().query(false)), Filter::default());
        // Every id given was out of range: matches nothing there either (id 0 is never given).
        let none = Filter::of_query(&Filter { ids: Some(Vec::new()), ..Filter::default() }.query(false));
        assert_eq!(none.ids, Some(vec![0]));
        // SKIPME stays with the asker (its caller is not another router's client).
        assert_eq!(Filter::of_query(&Filter { skip: Some(3), ..Filter::default() }.query(true)).skip, None);
    }

    #[test]
    fn the_line_has_redis_s_fields() {
        let c = ClientHandle::new(7, "127.0.0.1:5000".into(), "127.0.0.1:6379".into(), false);
        let line = c.info_line(crate::cmd::name_of);
        assert!(line.ends_with('\n'));
        assert!(
            line.starts_with(
                "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=-1 name= age=0 idle=0 flags=N "
            )
        );
        assert!(line.contains(" cmd=NULL user=default redir=-1 resp=2 lib-name= lib-ver=\n"), "{line}");
        assert_eq!(keys(&line).len(), 30);
    }

    #[test]
    fn flags_names_protocol_and_command_show() {
        let c = ClientHandle::new(1, "/tmp/s:0".into(), "/tmp/s".into(), true);
        assert!(c.info_line(crate::cmd::name_of).contains(" flags=U "));
        c.set_no_evict(true);
        c.set_held(true);
        assert!(c.info_line(crate::cmd::name_of).contains(" flags=bUe "));
        c.set_multi(Some(2));
        assert!(
            c.info_line(crate::cmd::name_of).contains(" flags=xbUe ")
                && c.info_line(crate::cmd::name_of).contains(" multi=2 ")
        );
        c.set_multi(None);
        assert!(c.info_line(crate::cmd::name_of).contains(" multi=-1 "));
        c.update_names(|n| n.name = Some(Bytes::from("worker")));
        c.set_protocol(Protocol::Resp3);
        let slot = crate::cmd::slot_of(crate::cmd::lookup(b"ping").unwrap());
        c.set_command(slot);
        let line = c.info_line(crate::cmd::name_of);
        assert!(line.contains(" name=worker "), "{line}");
        assert!(line.contains(" cmd=ping "), "{line}");
        assert!(line.contains(" resp=3 "), "{line}");
    }

    #[test]
    fn registration_ends_with_the_guard() {
        let clients = Clients::default();
        let a = clients.register(Arc::new(ClientHandle::new(2, "a".into(), "l".into(), false)));
        let b = clients.register(Arc::new(ClientHandle::new(1, "b".into(), "l".into(), false)));
        assert_eq!(clients.all().iter().map(|c| c.id).collect::<Vec<_>>(), [1, 2]);
        drop(a);
        assert!(clients.get(2).is_none());
        assert!(clients.get(1).is_some());
        drop(b);
        assert!(clients.all().is_empty());
    }

    #[tokio::test]
    async fn a_kill_wakes_a_waiter_and_is_remembered() {
        let c = Arc::new(ClientHandle::new(1, "a".into(), "l".into(), false));
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.killed().await }
        });
        tokio::task::yield_now().await;
        c.kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert!(c.is_killed());
        tokio::time::timeout(std::time::Duration::from_secs(1), c.killed()).await.expect("already killed");
    }
}
