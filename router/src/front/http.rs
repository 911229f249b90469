//! The HTTP/1.1 front end: the key/value API of the mkvss seed, plus the ops endpoints.
//!
//! | Route | Does | Answers |
//! |---|---|---|
//! | `GET /keys/{key}` | GET | 200 raw value, 404, 409 with the WRONGTYPE text for a hash, list, set or sorted set |
//! | `POST /keys` `{"key","value"}` `[?ttl=s]` | SET NX [EX] | 201, 409 if the key exists |
//! | `PUT /keys/{key}` raw body `[?ttl=s]` | SET [EX] | 200 |
//! | `DELETE /keys/{key}` | DEL | 200, 404 |
//! | `GET /keys/{key}/ttl` | TTL | 200 `{"key","ttl"}` (-1: none), 404 |
//! | `POST /keys/_mget` `{"keys":[...]}` | MGET | 200 `{"values":[{"key","value"}...]}` |
//! | `GET /healthz`, `/readyz`, `/metrics` | ops | readyz: 200 when this router can serve (listening, topology known), whatever the nodes' health |
//!
//! Keys are percent-decoded path segments (so any byte string can be a key: `/keys/a%2Fb`).
//! Requests run through the same command layer as RESP, so semantics and errors are the same.
//! With `--requirepass` (or an ACL default user with a password), API routes and `/metrics` need
//! `Authorization: Basic base64(user:password)` for any ACL user, or `Bearer <token>` where the
//! token is the password of a user (the first by name that has it; with `--requirepass` alone,
//! the default user's); requests then run as that user, under its ACL rules (403 with the NOPERM
//! text when refused). With `--metrics-token`, `/metrics` needs `Bearer <token>` instead,
//! from any address; without one, protected mode refuses non-loopback clients as on the
//! RESP port. `/healthz` and `/readyz` answer anyone (they are the pod's probes). With
//! `--metrics-addr`, that address serves only the ops endpoints ([`handle_ops`]). `--https`
//! serves the same API over TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use hyper::header::{ALLOW, AUTHORIZATION, CONNECTION, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode};
use serde::Deserialize;
use serde_json::json;
use shoal_telemetry::http::{HttpResponse, ops_endpoint, response};

use crate::acl::UserCell;
use crate::pipeline::record::{self, Timing};
use crate::pipeline::{Pipeline, Step};
use crate::resp::{ErrorKind, Reply};
use crate::server::protected_mode_allows;
use crate::session::Session;
use crate::state::{BufferHold, RouterState};

#[derive(Deserialize)]
struct NewKey {
    key: String,
    value: String,
}

#[derive(Deserialize)]
struct KeyList {
    keys: Vec<String>,
}

/// One client connection of the API. Its requests come one after another (HTTP/1.1), and they
/// run in one session, made at the first API request (as a RESP connection's commands do): a
/// session per request cost an allocation-heavy setup (its client handle, the peer's address
/// formatted) on every request. Each request still acts as the user its own credentials name.
pub struct Conn {
    peer: SocketAddr,
    state: Arc<RouterState>,
    /// Made at the first API request, held by each request while it runs (a connection's
    /// requests run one at a time: the lock is not contended), with the connection's way into
    /// the pipeline (each request alone: no lane).
    session: tokio::sync::Mutex<Option<(Session, Pipeline<()>)>>,
}

impl Conn {
    pub fn new(peer: SocketAddr, state: Arc<RouterState>) -> Arc<Conn> {
        Arc::new(Conn { peer, state, session: tokio::sync::Mutex::new(None) })
    }
}

/// A path's first four segments after the leading `/` (no route has more: a longer path matches
/// none), without allocating.
fn segments(path: &str) -> ([&str; 4], usize) {
    let mut out = [""; 4];
    let mut n = 0;
    for (slot, segment) in out.iter_mut().zip(path.trim_start_matches('/').split('/')) {
        *slot = segment;
        n += 1;
    }
    (out, n)
}

/// Handles one HTTP request of `conn`.
pub async fn handle(req: Request<Incoming>, conn: Arc<Conn>) -> HttpResponse {
    let (peer, state) = (conn.peer, &conn.state);
    // The path is borrowed from a clone of the URI (reference counts, no copy): the request
    // itself goes to `body` in the routes that read one.
    let uri = req.uri().clone();
    let path = uri.path();
    if req.method() == Method::GET {
        // /healthz and /readyz answer anyone (kubelet probes carry no credentials and do not
        // come from loopback); /metrics is guarded like the API below.
        if path == "/metrics" {
            let refused = match &state.settings.metrics_token {
                Some(token) => refuse_scrape(&req, token),
                None => refuse(&req, peer, state).err(),
            };
            if let Some(refused) = refused {
                return refused;
            }
            return response(
                StatusCode::OK,
                shoal_telemetry::metrics::CONTENT_TYPE,
                crate::scrape::render(state).await,
            );
        }
        if let Some(r) = ops_endpoint(path, || state.ready(), String::new) {
            return r;
        }
    }
    state.metrics.http_requests.inc();
    let user = match refuse(&req, peer, state) {
        Ok(user) => user,
        Err(refused) => return refused,
    };
    let ttl = match ttl_param(uri.query()) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let method = req.method().clone();
    let (segments, n) = segments(path);
    let mut slot = conn.session.lock().await;
    let (session, pipeline) = slot.get_or_insert_with(|| {
        (Session::http(state.next_client_id(), peer.to_string()), Pipeline::alone(state))
    });
    session.set_user(user);
    let mut api = Api { state, session, pipeline };
    match (&segments[..n], &method) {
        (["keys"], &Method::POST) => match body(req, state).await {
            Ok((b, _held)) => api.create(&b, ttl).await,
            Err(r) => r,
        },
        (["keys", "_mget"], &Method::POST) => match body(req, state).await {
            Ok((b, _held)) => api.mget(&b).await,
            Err(r) => r,
        },
        (["keys", key, "ttl"], &Method::GET) => match decode(key) {
            Some(k) => api.ttl(k).await,
            None => bad_key(),
        },
        (["keys", key], m) if !key.is_empty() => {
            let Some(key) = decode(key) else { return bad_key() };
            match *m {
                Method::GET => api.get(key).await,
                Method::PUT => match body(req, state).await {
                    Ok((b, _held)) => api.put(key, b, ttl).await,
                    Err(r) => r,
                },
                Method::DELETE => api.delete(key).await,
                _ => not_allowed("GET, PUT, DELETE"),
            }
        }
        // PUBLISH: the body is the message. Subscribing needs a connection that messages can
        // follow (an HTTP request stands alone), so it is RESP only.
        (["channels", channel], m) if !channel.is_empty() => {
            let Some(channel) = decode(channel) else { return bad_key() };
            match *m {
                Method::POST => match body(req, state).await {
                    Ok((b, _held)) => api.publish(channel, b).await,
                    Err(r) => r,
                },
                Method::GET => error(
                    StatusCode::BAD_REQUEST,
                    "subscribing needs a connection: each HTTP request stands alone; use RESP",
                ),
                _ => not_allowed("POST"),
            }
        }
        (["keys"], _) | (["keys", "_mget"], _) => not_allowed("POST"),
        _ => error(StatusCode::NOT_FOUND, "no such route"),
    }
}

/// Handles a request to `--metrics-addr`: only `/metrics` (guarded by `--metrics-token` when one
/// is set, else by who can reach the address: that is what a separate address is for),
/// `/healthz` and `/readyz`.
pub async fn handle_ops(req: Request<Incoming>, state: Arc<RouterState>) -> HttpResponse {
    if req.method() != Method::GET {
        return not_allowed("GET");
    }
    let path = req.uri().path();
    if path == "/metrics" {
        if let Some(refused) = state.settings.metrics_token.as_ref().and_then(|t| refuse_scrape(&req, t)) {
            return refused;
        }
        return response(
            StatusCode::OK,
            shoal_telemetry::metrics::CONTENT_TYPE,
            crate::scrape::render(&state).await,
        );
    }
    ops_endpoint(path, || state.ready(), String::new)
        .unwrap_or_else(|| error(StatusCode::NOT_FOUND, "this address serves /metrics, /healthz and /readyz"))
}

/// A request's view of the command layer.
struct Api<'a> {
    state: &'a Arc<RouterState>,
    session: &'a mut Session,
    pipeline: &'a mut Pipeline<()>,
}

impl Api<'_> {
    /// One request down the pipeline and back (see [`crate::pipeline`]).
    async fn run(&mut self, args: &[Bytes]) -> Reply {
        let pipeline = &mut *self.pipeline;
        pipeline.round();
        let mut step = pipeline.take(self.session, args, None, Instant::now(), |_, _| Some(()));
        if let Step::Held(_, spec) = step {
            // CLIENT PAUSE holds it, as it holds a RESP client's (until the pause's deadline).
            self.state.pause.wait(spec).await;
            step = pipeline.resume(self.session, spec, args, ());
        }
        let started = self.session.last_command;
        let slot = self.session.last_command_slot;
        let reply = match step {
            Step::Done(_, pending) => pending.resolve().await,
            Step::Joined => {
                pipeline.send(self.session);
                let call = pipeline.next_sent().expect("the lane it joined");
                call.wait().await.next().map_or(Reply::Nil, |(_, reply)| reply)
            }
            Step::Held(..) | Step::NotHere(_) => unreachable!("resumed above; HTTP carries every command"),
        };
        let failed = record::count_errors(self.state, slot, &reply);
        record::answered(self.state, self.session, Timing { started, slot, failed }, args);
        reply
    }

    async fn get(&mut self, key: Bytes) -> HttpResponse {
        match self.run(&[Bytes::from_static(b"GET"), key]).await {
            Reply::Bulk(v) => response(StatusCode::OK, "application/octet-stream", v),
            Reply::Nil => error(StatusCode::NOT_FOUND, "no such key"),
            other => failure(other),
        }
    }

    async fn create(&mut self, body: &Bytes, ttl: Option<i64>) -> HttpResponse {
        let new: NewKey = match serde_json::from_slice(body) {
            Ok(n) => n,
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("expected {{\"key\",\"value\"}}: {e}")),
        };
        let mut args = vec!["SET".into(), Bytes::from(new.key), Bytes::from(new.value), "NX".into()];
        with_ttl(&mut args, ttl);
        match self.run(&args).await {
            Reply::Simple(_) => {
                response(StatusCode::CREATED, "application/json", json!({"created": true}).to_string())
            }
            Reply::Nil => error(StatusCode::CONFLICT, "key already exists"),
            other => failure(other),
        }
    }

    async fn put(&mut self, key: Bytes, value: Bytes, ttl: Option<i64>) -> HttpResponse {
        let mut args = vec!["SET".into(), key, value];
        with_ttl(&mut args, ttl);
        match self.run(&args).await {
            Reply::Simple(_) => {
                response(StatusCode::OK, "application/json", json!({"stored": true}).to_string())
            }
            other => failure(other),
        }
    }

    async fn delete(&mut self, key: Bytes) -> HttpResponse {
        match self.run(&[Bytes::from_static(b"DEL"), key]).await {
            Reply::Int(1) => {
                response(StatusCode::OK, "application/json", json!({"deleted": true}).to_string())
            }
            Reply::Int(_) => error(StatusCode::NOT_FOUND, "no such key"),
            other => failure(other),
        }
    }

    async fn publish(&mut self, channel: Bytes, message: Bytes) -> HttpResponse {
        match self.run(&[Bytes::from_static(b"PUBLISH"), channel, message]).await {
            Reply::Int(n) => {
                response(StatusCode::OK, "application/json", json!({"receivers": n}).to_string())
            }
            other => failure(other),
        }
    }

    async fn ttl(&mut self, key: Bytes) -> HttpResponse {
        let name = String::from_utf8_lossy(&key).into_owned();
        match self.run(&[Bytes::from_static(b"TTL"), key]).await {
            Reply::Int(-2) => error(StatusCode::NOT_FOUND, "no such key"),
            Reply::Int(t) => {
                response(StatusCode::OK, "application/json", json!({"key": name, "ttl": t}).to_string())
            }
            other => failure(other),
        }
    }

    async fn mget(&mut self, body: &Bytes) -> HttpResponse {
        let list: KeyList = match serde_json::from_slice(body) {
            Ok(l) => l,
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("expected {{\"keys\":[...]}}: {e}")),
        };
        if list.keys.is_empty() {
            return response(StatusCode::OK, "application/json", json!({"values": []}).to_string());
        }
        let mut args = vec![Bytes::from("MGET")];
        args.extend(list.keys.iter().map(|k| Bytes::from(k.clone())));
        match self.run(&args).await {
            Reply::Array(values) => {
                let items: Vec<serde_json::Value> = list
                    .keys
                    .iter()
                    .zip(values)
                    .map(|(k, v)| match v {
                        Reply::Bulk(b) => match std::str::from_utf8(&b) {
                            Ok(s) => json!({"key": k, "value": s}),
                            Err(_) => json!({"key": k, "value_base64": base64::engine::general_purpose::STANDARD.encode(&b)}),
                        },
                        _ => json!({"key": k, "value": null}),
                    })
                    .collect();
                response(StatusCode::OK, "application/json", json!({"values": items}).to_string())
            }
            other => failure(other),
        }
    }
}

fn with_ttl(args: &mut Vec<Bytes>, ttl: Option<i64>) {
    if let Some(t) = ttl {
        args.push("EX".into());
        args.push(Bytes::from(t.to_string()));
    }
}

/// The access rule of the API and `/metrics`, as on the RESP port: when the default user needs
/// no password, protected mode admits only loopback clients; credentials, when given, must be
/// valid, and are required when the default user has a password. `Ok` with the ACL user the
/// request acts as (`None`: `default`), else the refusal.
fn refuse(
    req: &Request<Incoming>,
    peer: SocketAddr,
    state: &RouterState,
) -> Result<Option<Arc<UserCell>>, HttpResponse> {
    let open = state.acl.default_open();
    if open && state.settings.protected_mode && !protected_mode_allows(peer.ip()) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "protected mode: only loopback clients are accepted without a password",
        ));
    }
    let unauthorized = || {
        let mut r = error(StatusCode::UNAUTHORIZED, "authentication required");
        r.headers_mut().insert(WWW_AUTHENTICATE, "Basic realm=\"shoal\"".parse().expect("static header"));
        r
    };
    match credentials(req, state) {
        Credentials::None if open => Ok(None),
        Credentials::None | Credentials::Invalid => Err(unauthorized()),
        Credentials::User(cell) if Arc::ptr_eq(&cell, state.acl.default_user()) => Ok(None),
        Credentials::User(cell) => Ok(Some(cell)),
    }
}

/// `/metrics` with `--metrics-token`: the request must carry `Bearer <token>` (the password does
/// not stand in for it, nor does coming from loopback).
fn refuse_scrape(req: &Request<Incoming>, token: &str) -> Option<HttpResponse> {
    let given = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()?.strip_prefix("Bearer "));
    if given.is_some_and(|g| shoal_wire::auth::constant_time_eq(g.trim().as_bytes(), token.as_bytes())) {
        return None;
    }
    let mut r = error(StatusCode::UNAUTHORIZED, "a metrics token is required (--metrics-token)");
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, "Bearer realm=\"shoal-metrics\"".parse().expect("static header"));
    Some(r)
}

enum Credentials {
    None,
    Invalid,
    User(Arc<UserCell>),
}

/// The ACL user a request's `Authorization` names: `Basic base64(user:password)` is that user
/// (as AUTH user password); `Bearer <token>` is the first user, by name, that is on and has the
/// token as one of its passwords (so a service's token is its user's password; `--requirepass`
/// alone makes it the default user's, as before).
fn credentials(req: &Request<Incoming>, state: &RouterState) -> Credentials {
    let Some(value) = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Credentials::None;
    };
    let found = if let Some(token) = value.strip_prefix("Bearer ") {
        state.acl.by_password(token.trim().as_bytes())
    } else if let Some(b64) = value.strip_prefix("Basic ")
        && let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim())
        && let Some(colon) = raw.iter().position(|&c| c == b':')
    {
        state.acl.authenticate(&raw[..colon], &raw[colon + 1..])
    } else {
        None
    };
    found.map_or(Credentials::Invalid, Credentials::User)
}

/// `?ttl=SECONDS`: a positive integer, or absent.
fn ttl_param(query: Option<&str>) -> Result<Option<i64>, HttpResponse> {
    let Some(q) = query else { return Ok(None) };
    for pair in q.split('&') {
        if let Some(v) = pair.strip_prefix("ttl=") {
            return match v.parse::<i64>() {
                Ok(t) if t > 0 => Ok(Some(t)),
                _ => Err(error(StatusCode::BAD_REQUEST, "ttl must be a positive integer (seconds)")),
            };
        }
    }
    Ok(None)
}

/// Reads a request body, within `--http-max-body` (413), `--http-body-timeout-ms` (408) and the
/// process-wide request buffer budget (503; a declared `Content-Length` is taken from the budget
/// before a byte is read). The returned hold keeps the body's bytes counted until the request is
/// answered. A refused request's connection is closed (the rest of its body is never read).
async fn body<'s>(
    req: Request<Incoming>,
    state: &'s RouterState,
) -> Result<(Bytes, BufferHold<'s>), HttpResponse> {
    let max = state.settings.http_max_body;
    let too_large = || closing(error(StatusCode::PAYLOAD_TOO_LARGE, "request body exceeds the limit"));
    let exhausted = || {
        state.metrics.buffer_refusals.inc();
        let mut r = closing(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "request buffer budget exhausted: the router holds too much unprocessed request data \
             from all clients (--request-buffer-budget); try again later",
        ));
        r.headers_mut().insert(RETRY_AFTER, "1".parse().expect("static header"));
        r
    };
    let mut held = state.buffers.hold(0);
    let mut incoming = req.into_body();
    let declared = incoming.size_hint().exact();
    if let Some(n) = declared {
        if n > max as u64 {
            return Err(too_large());
        }
        if !held.resize(n as usize) {
            return Err(exhausted());
        }
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
    let read = async {
        while let Some(frame) = incoming.frame().await {
            let frame = frame.map_err(|e| {
                closing(error(StatusCode::BAD_REQUEST, &format!("could not read the body: {e}")))
            })?;
            let Ok(data) = frame.into_data() else { continue }; // trailers
            if buf.len() + data.len() > max {
                return Err(too_large());
            }
            if !held.reserve(buf.len(), buf.capacity(), data.len()) {
                return Err(exhausted());
            }
            buf.extend_from_slice(&data);
            held.set(buf.capacity());
        }
        Ok(())
    };
    let outcome = match state.settings.http_body_timeout {
        Some(limit) => tokio::time::timeout(limit, read).await.unwrap_or_else(|_| {
            state.metrics.http_body_timeouts.inc();
            Err(closing(error(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the request body did not arrive within {} ms", limit.as_millis()),
            )))
        }),
        None => read.await,
    };
    outcome.map(|()| (buf.freeze(), held))
}

/// Marks a response as the connection's last (hyper closes it after writing).
fn closing(mut r: HttpResponse) -> HttpResponse {
    r.headers_mut().insert(CONNECTION, "close".parse().expect("static header"));
    r
}

/// Percent-decodes a path segment into raw key bytes.
fn decode(segment: &str) -> Option<Bytes> {
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out.into())
}

fn error(status: StatusCode, message: &str) -> HttpResponse {
    response(status, "application/json", json!({"error": message}).to_string())
}

fn bad_key() -> HttpResponse {
    error(StatusCode::BAD_REQUEST, "malformed percent-encoding in key")
}

fn not_allowed(allow: &'static str) -> HttpResponse {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    r.headers_mut().insert(ALLOW, allow.parse().expect("static header"));
    r
}

/// A command error as an HTTP status, by the kind the refusal carries from where it was made
/// (the one mapper from the type): a node that could not answer is 503 (the request may be
/// retried), out of memory 507, a key holding another type than the route works on (a hash at
/// `GET /keys/h`) 409 with the WRONGTYPE text, an ACL refusal 403, anything else a bad request.
fn failure(reply: Reply) -> HttpResponse {
    match reply {
        Reply::Failure(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Reply::Error(text, kind) => match kind {
            ErrorKind::OutOfMemory => error(StatusCode::INSUFFICIENT_STORAGE, &text),
            ErrorKind::WrongType => error(StatusCode::CONFLICT, &text),
            ErrorKind::NoPerm => error(StatusCode::FORBIDDEN, &text),
            ErrorKind::Other => error(StatusCode::BAD_REQUEST, &text),
        },
        other => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("unexpected reply {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(decode("a%2Fb").unwrap(), "a/b");
        assert_eq!(decode("%00%ff").unwrap(), &b"\0\xff"[..]);
        assert_eq!(decode("plain").unwrap(), "plain");
        assert!(decode("%zz").is_none());
        assert!(decode("%4").is_none());
    }

    #[test]
    fn ttl_query() {
        assert_eq!(ttl_param(None).ok().unwrap(), None);
        assert_eq!(ttl_param(Some("ttl=30")).ok().unwrap(), Some(30));
        assert_eq!(ttl_param(Some("x=1&ttl=5")).ok().unwrap(), Some(5));
        assert!(ttl_param(Some("ttl=0")).is_err());
        assert!(ttl_param(Some("ttl=abc")).is_err());
    }
}
