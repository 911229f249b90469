//! A script's reach beyond its node: the other nodes it holds while it runs, and its calls on
//! their keys (the other nodes' half is `crate::held`; the argument is in docs/architecture.md,
//! "Scripts over several nodes").
//!
//! A script runs on one node, under that node's gate. Before it starts, that node holds every
//! other node that owns one of its declared keys (and every node the router lists, for a script
//! known to reach undeclared keys), one `Hold` stream each, taken in the order of the nodes'
//! positions after its own gate: while the script runs, no other op runs on any node it touches,
//! so nobody sees part of it and nothing interleaves with it, as on one Redis. A call on a key of
//! a held node travels on that node's stream and is applied there under its hold.
//!
//! A call on an undeclared key of a node not held reaches for it mid-run. If the script has not
//! written yet, a refusal (the node stays held elsewhere past [`IN_ORDER`], or [`AGAINST_ORDER`]
//! for a node before this one) ends the run with nothing done: the router learns that the script
//! reaches and sends it again to the first node, holding every node. If it has written, it waits
//! longer ([`AFTER_WRITE`]); a refusal then fails that call (its earlier writes stand, as a
//! script's writes do when a call fails on Redis), counted in
//! `shoal_node_script_reach_refused_total`. Either way the run is marked `reached`: this node and
//! the router remember the script and hold every node before its later runs, so it never reaches
//! mid-run again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use shoal_wire::client::{self, Client, ClientOptions};
use shoal_wire::proto::{self, HeldOp, HoldRequest, HoldStart, Op, Reply, hold_request, reply};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::membership::Membership;
use crate::membership::view::NodeView;

/// One command over keys of two nodes that a script cannot do in steps (`super::spread`).
pub const CROSS_NODE: &str = "CROSSSLOT Keys in request don't hash to the same slot";
/// A call on a key no node may serve for this script (Redis Cluster's text).
pub const NON_LOCAL: &str = "ERR Script attempted to access a non local key in a cluster node";
/// A call on a key in a slot moving between nodes.
pub const MOVING: &str = "ERR Script attempted to access a key in a slot that is moving between nodes; \
    declare the keys a script uses (numkeys) so that it waits for the move";

/// How long a node held elsewhere is waited for, before the script writes (giving up loses
/// nothing: the router sends the script again), when the node comes after this one and every
/// node held already, in the nodes' order: every wait of that kind goes up the one order (as a
/// transaction's prepares do), so none waits in a circle.
pub const IN_ORDER: Duration = Duration::from_millis(100);
/// The same for a node before this one: a wait against the order may be half of a circle (that
/// node's holder waiting for this one), so it is short.
pub const AGAINST_ORDER: Duration = Duration::from_millis(30);
/// How long a node is waited for mid-run once the script has written (giving up fails the call).
pub const AFTER_WRITE: Duration = Duration::from_millis(5000);
/// A held node's answer to one op may take this long beyond the op's own time.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a finished script waits for a node it held to say it let go.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a key is served, for a script running here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Here,
    /// On the node with this topology id.
    There(u32),
}

/// What a node's scripts need to reach the others: the membership (this node's id, the
/// credentials of node links) and the clients already connected, by address.
#[derive(Debug)]
pub struct Peers {
    membership: Arc<Membership>,
    clients: Mutex<HashMap<String, Client>>,
    /// This node's id as of a topology version (found once per version: every script asks).
    own: Mutex<(u64, Option<u32>)>,
}

impl Peers {
    pub fn new(membership: Arc<Membership>) -> Peers {
        Peers { membership, clients: Mutex::new(HashMap::new()), own: Mutex::new((0, None)) }
    }

    /// This node's id in the topology of `version` (None: not a primary of it).
    fn own(&self, version: u64) -> Option<u32> {
        let mut own = self.own.lock();
        if own.0 != version {
            *own = (version, self.membership.primary_of().map(|(_, id, _)| id));
        }
        own.1
    }

    async fn client(&self, addr: &str) -> Result<Client, String> {
        if let Some(c) = self.clients.lock().get(addr) {
            return Ok(c.clone());
        }
        let options = ClientOptions::default().with_credentials(self.membership.credentials.clone());
        let c = client::connect(addr, &options).await.map_err(|e| e.to_string())?;
        self.clients.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }
}

/// One held node: the stream the script's ops go on, and their answers.
struct Link {
    ops: mpsc::Sender<HoldRequest>,
    answers: tonic::Streaming<Reply>,
}

/// A running script's holds on other nodes (see the module doc). Dropping it ends every hold
/// and waits until the held nodes let go.
pub struct Reach {
    peers: Option<(Arc<Peers>, tokio::runtime::Handle)>,
    view: Arc<NodeView>,
    version: u64,
    /// This node's id in the topology it serves (None: no topology, or not a primary).
    own: Option<u32>,
    held: BTreeMap<u32, Link>,
    /// The nodes of its declared keys (other than this one).
    declared: Vec<u32>,
    /// A call reached a node that owns none of its declared keys.
    pub reached: bool,
    /// The run was given up before it wrote: its answer (`try_again`, BUSY) replaces the script's.
    pub given_up: Option<Reply>,
    /// The script is a library function (told to the nodes it holds: their BUSY names FUNCTION
    /// KILL).
    pub function: bool,
}

impl Drop for Reach {
    /// Ends every hold and waits (bounded by [`RELEASE_TIMEOUT`]) until each held node has let
    /// go: its `Hold` stream ends once its holder has released the gate. So the script's reply
    /// never reaches its client before the nodes it held serve again; a command sent right after
    /// it would otherwise meet the hold still in place, wait for it, and past
    /// busy-reply-threshold be answered BUSY for a script that has ended.
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        // Only on the script thread (never inside the runtime, where waiting would block it).
        let Some((_, rt)) = &self.peers else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Never today: a Reach lives on the script thread. Loud if that changes, since the
            // BUSY-after-the-script-ended race above would come back silently.
            debug_assert!(false, "a Reach with holds dropped inside the runtime: not waiting for them");
            tracing::warn!("a script's holds ended without waiting for the held nodes (inside the runtime)");
            return;
        }
        let mut streams = Vec::with_capacity(held.len());
        for Link { ops, answers } in held.into_values() {
            drop(ops);
            streams.push(answers);
        }
        rt.block_on(async move {
            let all_ended = async {
                for mut answers in streams {
                    while let Ok(Some(_)) = answers.message().await {}
                }
            };
            let _ = tokio::time::timeout(RELEASE_TIMEOUT, all_ended).await;
        });
    }
}

impl Reach {
    /// A script that may reach other nodes (`peers`: none for a node outside a cluster).
    pub fn new(
        peers: Option<(Arc<Peers>, tokio::runtime::Handle)>,
        view: Arc<NodeView>,
        version: u64,
    ) -> Reach {
        let own = match (&peers, &view.topology) {
            (Some((p, _)), Some(t)) => p.own(t.version),
            _ => None,
        };
        Reach {
            peers,
            view,
            version,
            own,
            held: BTreeMap::new(),
            declared: Vec::new(),
            reached: false,
            given_up: None,
            function: false,
        }
    }

    /// A script that reaches no other node (one inside a transaction: the transaction holds only
    /// this node).
    pub fn local(view: Arc<NodeView>, version: u64) -> Reach {
        Reach::new(None, view, version)
    }

    /// Where `key` is served for this script: here, on another node, or nowhere it may go (the
    /// error a call on it answers).
    pub fn locate(&self, key: &[u8]) -> Result<Place, &'static str> {
        let slot = shoal_wire::key_slot(key);
        if self.view.check(slot, self.version).is_ok() {
            return if self.view.is_moving(slot) { Err(MOVING) } else { Ok(Place::Here) };
        }
        let (Some(t), Some(own)) = (&self.view.topology, self.own) else { return Err(NON_LOCAL) };
        if self.version > t.version {
            return Err(NON_LOCAL);
        }
        if t.migration_of(slot).is_some() {
            return Err(MOVING);
        }
        match t.owner_of(slot) {
            Some(id) if id != own => Ok(Place::There(id)),
            _ => Err(NON_LOCAL),
        }
    }

    /// Whether the topology has nodes other than this one (a script may reach them).
    pub fn several(&self) -> bool {
        matches!((&self.view.topology, self.own), (Some(t), Some(_)) if t.nodes.len() > 1)
    }

    /// The other nodes of the topology, in position order (for a script held over all of them).
    pub fn others(&self) -> Vec<u32> {
        match (&self.view.topology, self.own) {
            (Some(t), Some(own)) => t.nodes.iter().map(|n| n.id).filter(|&id| id != own).collect(),
            _ => Vec::new(),
        }
    }

    /// A node's position in the topology (the order holds are taken in).
    fn position(&self, id: Option<u32>) -> Option<usize> {
        let t = self.view.topology.as_ref()?;
        t.nodes.iter().position(|n| Some(n.id) == id)
    }

    /// This node's id in the topology (None: outside a cluster, or not a primary).
    pub fn own(&self) -> Option<u32> {
        self.own
    }

    /// Whether this node is the first of the topology (where scripts holding every node run).
    pub fn first_node(&self) -> bool {
        self.own.is_some() && self.position(self.own) == Some(0)
    }

    /// Notes the nodes of the script's declared keys: a call elsewhere marks it `reached`.
    pub fn declare(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.declared.extend(ids);
    }

    /// Whether node `id` owns one of the script's declared keys.
    pub fn is_declared(&self, id: u32) -> bool {
        self.declared.contains(&id)
    }

    /// `ids` in the order of their positions.
    pub fn in_order(&self, ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut ids: Vec<u32> = ids.into_iter().collect();
        ids.sort_by_key(|&id| self.position(Some(id)));
        ids
    }

    pub fn holds(&self, id: u32) -> bool {
        self.held.contains_key(&id)
    }

    /// Holds node `id` for this script, its declared `keys` there checked (and a transaction's
    /// `watches` of keys there: `aborted` if one changed); waits for its gate
    /// as long as the order allows ([`IN_ORDER`], [`AGAINST_ORDER`]), or [`AFTER_WRITE`] when
    /// `wrote`. `Err`: that node's refusal (nothing held there).
    pub fn hold(
        &mut self,
        id: u32,
        keys: Vec<Bytes>,
        watches: Vec<proto::Watched>,
        wrote: bool,
    ) -> Result<(), Reply> {
        if self.holds(id) || Some(id) == self.own {
            return Ok(());
        }
        // In order: after this node and every node held already (a reach mid-run may come
        // before one of those).
        let highest =
            self.held.keys().map(|&h| self.position(Some(h))).max().flatten().max(self.position(self.own));
        let wait = if wrote {
            AFTER_WRITE
        } else if self.position(Some(id)) > highest {
            IN_ORDER
        } else {
            AGAINST_ORDER
        };
        let refused =
            |text: String| crate::ops::error(&format!("ERR cannot hold node {id} for a script: {text}"));
        let (Some((peers, rt)), Some(t)) = (&self.peers, &self.view.topology) else {
            return Err(crate::ops::error(NON_LOCAL));
        };
        let Some(addr) = t.node(id).map(|n| n.addr.clone()) else {
            return Err(refused("not in the topology".into()));
        };
        let (ops, queued) = mpsc::channel(2);
        let start = HoldStart {
            topology_version: self.version,
            keys,
            wait_ms: wait.as_millis() as u64,
            after_write: wrote,
            watches,
            function: self.function,
        };
        let _ = ops.try_send(HoldRequest { kind: Some(hold_request::Kind::Start(start)) });
        let peers = peers.clone();
        let opened = rt.block_on(async move {
            let mut client = peers.client(&addr).await?;
            let mut answers = client
                .hold(ReceiverStream::new(queued))
                .await
                .map_err(|s| s.message().to_string())?
                .into_inner();
            match tokio::time::timeout(wait + ANSWER_TIMEOUT, answers.message()).await {
                Ok(Ok(Some(first))) => Ok((answers, first)),
                Ok(Ok(None)) => Err("the node ended the hold".to_string()),
                Ok(Err(s)) => Err(s.message().to_string()),
                Err(_) => Err("no answer".to_string()),
            }
        });
        match opened {
            Ok((answers, Reply { kind: Some(reply::Kind::Ok(_)), .. })) => {
                self.held.insert(id, Link { ops, answers });
                Ok(())
            }
            Ok((_, refusal)) => Err(refusal),
            Err(e) => Err(refused(e)),
        }
    }

    /// Applies `op` on held node `id` and answers its reply.
    pub fn apply(&mut self, id: u32, op: Op, write: bool) -> Reply {
        let (Some((_, rt)), Some(link)) = (&self.peers, self.held.get_mut(&id)) else {
            return crate::ops::error(NON_LOCAL);
        };
        let sent = HoldRequest { kind: Some(hold_request::Kind::Op(HeldOp { op: Some(op), write })) };
        let answered = rt.block_on(async {
            link.ops.send(sent).await.map_err(|_| "the hold ended".to_string())?;
            match tokio::time::timeout(ANSWER_TIMEOUT, link.answers.message()).await {
                Ok(Ok(Some(r))) => Ok(r),
                Ok(Ok(None)) => Err("the hold ended".to_string()),
                Ok(Err(s)) => Err(s.message().to_string()),
                Err(_) => Err("no answer".to_string()),
            }
        });
        answered.unwrap_or_else(|e| {
            // The node is gone or stuck: nothing more goes to it.
            self.held.remove(&id);
            crate::ops::error(&format!("ERR a script's call on node {id} failed: {e}"))
        })
    }

    /// How many other nodes the script holds.
    pub fn holding(&self) -> usize {
        self.held.len()
    }
}

/// A reply that refused a hold, as the script's own answer to its router: a held node in a
/// newer or older topology, or held elsewhere too long, is a reason to send the script again;
/// BUSY and errors are the answer.
pub fn refusal_to_router(r: Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Error(_)) => r,
        _ => crate::ops::try_again(),
    }
}

/// The answer of a script that runs from the first node, holding every node, and arrived
/// elsewhere: a script reply with no frame (`reached` if this node knows the script reaches),
/// which the router answers by sending it there.
pub fn from_the_first_node(reached: bool) -> Reply {
    let r = proto::ScriptReply { reached, ..Default::default() };
    Reply { kind: Some(reply::Kind::Script(Box::new(r))), ..Default::default() }
}

/// The answer of a run given up mid-way before it wrote: "send it again, holding every node"
/// (a script reply with no frame that says it reached), or the refusal itself (BUSY, an error).
pub fn given_up_to_router(r: Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::TryAgain(_)) => from_the_first_node(true),
        _ => r,
    }
}
