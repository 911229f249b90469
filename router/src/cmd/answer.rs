//! Node replies as client replies: the ops handlers build and how their replies are read.

use shoal_wire::proto::{self, Op, op::Kind, reply};

use super::spec::{Args, Ctx, Pending};
use crate::backend::{BackendError, MultiCall};
use crate::resp::{ErrorKind, Reply};

/// Builds an op from its kind.
pub fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// A one-key command whose op `shoal_wire::command` builds (the builder a node's script uses
/// too): the op, built and not sent ([`Pending::Op`]); the pipeline sends it, alone or in a lane
/// with other requests' ops, and reads its reply as the builder says.
pub fn one_key(args: &Args, ctx: &mut Ctx, build: shoal_wire::command::Builder) -> Pending {
    match build(args, ctx.now_ms()) {
        Ok(b) => Pending::Op(b),
        Err(e) => Reply::error(e).into(),
    }
}

/// How a node reply becomes the client's, per [`shoal_wire::command::Answer`].
pub fn answer(a: shoal_wire::command::Answer) -> fn(proto::Reply) -> Reply {
    use shoal_wire::command::Answer;
    match a {
        Answer::Plain => plain,
        Answer::StoredAsInt => |r| match plain(r) {
            Reply::Nil => Reply::Int(0),
            Reply::Simple(_) => Reply::Int(1),
            other => other,
        },
        Answer::Status => |r| match r.kind {
            Some(reply::Kind::Value(v)) => Reply::Simple(String::from_utf8_lossy(&v).into_owned().into()),
            _ => plain(r),
        },
        Answer::Seconds => |r| match r.kind {
            Some(reply::Kind::Int(ms)) => Reply::Int(shoal_wire::command::ms_to_seconds(ms)),
            _ => plain(r),
        },
    }
}

/// The straightforward mapping of a node reply to a client reply.
pub fn plain(r: proto::Reply) -> Reply {
    let kind = r.error_kind();
    match r.kind {
        Some(reply::Kind::Ok(_)) => Reply::OK,
        Some(reply::Kind::Nil(_)) | None => Reply::Nil,
        Some(reply::Kind::Value(v)) => Reply::Bulk(v),
        Some(reply::Kind::Tracked(t)) => Reply::Bulk(t.value),
        Some(reply::Kind::Int(n)) => Reply::Int(n),
        Some(reply::Kind::Error(e)) => node_error(e, kind),
        Some(reply::Kind::Keys(k)) => Reply::Array(k.keys.into_iter().map(Reply::Bulk).collect()),
        other => unexpected(other),
    }
}

/// A node's error line, with the kind its reply says it is.
pub fn node_error(line: String, kind: proto::ErrorKind) -> Reply {
    Reply::refusal(ErrorKind::of_node(kind), line)
}

/// A node reply the command did not expect (a node of another version, or a bug).
pub fn unexpected(kind: Option<reply::Kind>) -> Reply {
    BackendError::BadReply(format!("{kind:?}")).into()
}

/// The integer in a node reply, or the reply to send instead.
pub fn reply_int(r: proto::Reply) -> Result<i64, Reply> {
    let kind = r.error_kind();
    match r.kind {
        Some(reply::Kind::Int(n)) => Ok(n),
        Some(reply::Kind::Error(e)) => Err(node_error(e, kind)),
        other => Err(unexpected(other)),
    }
}

/// The replies of a multi-key call, in argument order; the first error a node answered (or the
/// call's own failure) becomes the command's reply.
pub async fn gather(call: MultiCall) -> Result<Vec<proto::Reply>, Reply> {
    let replies = call.gather().await?;
    match replies.iter().find_map(|r| match &r.kind {
        Some(reply::Kind::Error(e)) => Some(node_error(e.clone(), r.error_kind())),
        _ => None,
    }) {
        Some(e) => Err(e),
        None => Ok(replies),
    }
}

/// The sum of a multi-key call's integer replies (DEL, EXISTS, TOUCH, UNLINK).
pub async fn sum(call: MultiCall) -> Reply {
    gather(call).await.map_or_else(|e| e, sum_ints)
}

/// Adds up integer replies; the first non-integer reply becomes the command's reply.
pub fn sum_ints(replies: Vec<proto::Reply>) -> Reply {
    let mut total = 0;
    for r in replies {
        match reply_int(r) {
            Ok(n) => total += n,
            Err(e) => return e,
        }
    }
    Reply::Int(total)
}
