//! Per-connection client state: protocol version, authentication, name, identity.

use std::time::Instant;

use bytes::Bytes;

use crate::resp::Protocol;

#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub protocol: Protocol,
    pub authenticated: bool,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    /// Peer address as CLIENT INFO shows it (`ip:port`, or `path:0` on a Unix socket).
    pub peer: String,
    pub local: String,
    pub created: Instant,
    pub last_command: Instant,
    pub last_command_name: &'static str,
    /// The stats slot of the command being dispatched (`None`: not a known command).
    pub last_command_slot: Option<usize>,
}

impl Session {
    /// A new connection; `authenticated` is true when no password is configured.
    pub fn new(id: u64, peer: String, local: String, authenticated: bool) -> Session {
        let now = Instant::now();
        Session {
            id,
            protocol: Protocol::Resp2,
            authenticated,
            name: None,
            lib_name: None,
            lib_ver: None,
            peer,
            local,
            created: now,
            last_command: now,
            last_command_name: "NULL",
            last_command_slot: None,
        }
    }

    /// RESET: back to a fresh connection's state (keeping identity).
    pub fn reset(&mut self, password_required: bool) {
        self.protocol = Protocol::Resp2;
        self.authenticated = !password_required;
        self.name = None;
    }

    /// The CLIENT INFO / CLIENT LIST line for this connection.
    pub fn info_line(&self) -> String {
        let name = self.name.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let lib_name = self.lib_name.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let lib_ver = self.lib_ver.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r \
             cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.peer,
            self.local,
            name,
            self.created.elapsed().as_secs(),
            self.last_command.elapsed().as_secs(),
            self.last_command_name,
            self.protocol.version(),
            lib_name,
            lib_ver,
        )
    }
}
