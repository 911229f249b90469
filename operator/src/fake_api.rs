//! A scripted fake Kubernetes API server for API-call scenario tests (tests only): a
//! `kube::Client` whose requests are checked, in order, against a script of expected calls
//! (method, path, an optional check of the JSON body) and answered from it. A request nobody
//! expected gets a 500 and is recorded; [`Fake::done`] fails the test on those and on calls the
//! script expected but never saw.

use std::collections::VecDeque;
use std::sync::Arc;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};

pub type Check = Box<dyn Fn(&Value) + Send + Sync>;

/// One expected request and the answer to it.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub status: u16,
    pub answer: Value,
    pub check: Option<Check>,
}

pub fn call(method: Method, path: impl Into<String>, status: u16, answer: Value) -> Call {
    Call { method, path: path.into(), status, answer, check: None }
}

/// A request answered with its own body (server-side apply, creates).
pub fn echo(method: Method, path: impl Into<String>) -> Call {
    call(method, path, 200, Value::Null)
}

impl Call {
    /// Also check the request's JSON body.
    pub fn checking(mut self, check: impl Fn(&Value) + Send + Sync + 'static) -> Call {
        self.check = Some(Box::new(check));
        self
    }
}

/// A `Status` error body, as the API server sends with a failing code.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": format!("{reason} (fake API)")})
}

pub struct Fake {
    script: Arc<Mutex<VecDeque<Call>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    pub fn start(calls: Vec<Call>) -> (kube::Client, Fake) {
        let script = Arc::new(Mutex::new(VecDeque::from(calls)));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s, e) = (script.clone(), errors.clone());
        let svc = tower::service_fn(move |req: Request<Body>| {
            let (s, e) = (s.clone(), e.clone());
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let next = s.lock().pop_front();
                let (code, answer) = match next {
                    Some(c) if c.method == parts.method && c.path == parts.uri.path() => {
                        if let Some(check) = &c.check {
                            check(&serde_json::from_slice(&bytes).unwrap_or(Value::Null));
                        }
                        // A null answer echoes the request (what server-side apply returns, roughly).
                        let answer = if c.answer.is_null() {
                            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
                        } else {
                            c.answer
                        };
                        (c.status, answer)
                    }
                    other => {
                        let expected = other.map(|c| format!("{} {}", c.method, c.path));
                        let what = format!("got {} {}, expected {expected:?}", parts.method, parts.uri);
                        e.lock().push(what.clone());
                        let mut answer = status(500, "InternalError");
                        answer["message"] = format!("unexpected request: {what}").into();
                        (500, answer)
                    }
                };
                let body = Body::from(serde_json::to_vec(&answer).unwrap());
                Ok::<_, std::convert::Infallible>(Response::builder().status(code).body(body).unwrap())
            }
        });
        (kube::Client::new(svc, "default"), Fake { script, errors })
    }

    /// Fails the test on unexpected requests and on expected ones never made.
    pub fn done(&self) {
        assert!(self.errors.lock().is_empty(), "unexpected requests: {:#?}", self.errors.lock());
        let left: Vec<String> =
            self.script.lock().iter().map(|c| format!("{} {}", c.method, c.path)).collect();
        assert!(left.is_empty(), "expected requests never made: {left:#?}");
    }
}
